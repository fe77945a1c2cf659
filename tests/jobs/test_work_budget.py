"""--work-budget: a build whose work files would not fit is refused before it starts, or
stopped at the pass that would go over with what it counted kept; --resume with room
gives the table a build without a budget gives."""

import os
from types import SimpleNamespace

import pytest
from helpers import build, random_corpus, result
from oracle import select

from fgram.jobs.budget import (
    WORK_BYTES_PER_TOKEN,
    OverBudget,
    PassBudget,
    bytes_per_token,
    check_fits,
    work_estimate,
)
from fgram.pipeline.errors import ConfigError

N = 100_000


def build_with(src, out, **kw):
    """The build these tests run, on the local engine (``kw``: the budget, --resume)."""
    opts = {"dtype": "uint16", "doc_sep": 0, "max_len": 4, "size": 500, "engine": "local"}
    return build(None, [src], out, unit_tokens=10_000, **{**opts, **kw})


def test_a_build_over_its_budget_is_refused_before_it_starts(tmp_path):
    src, _ = random_corpus(str(tmp_path / "c.bin"), N)
    tokens = os.path.getsize(src) // 2
    with pytest.raises(ConfigError) as err:
        build_with(src, tmp_path / "t", work_budget=int(tokens * WORK_BYTES_PER_TOKEN) - 1)
    assert str(err.value).startswith("--work-budget ") and "at its largest pass" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["c.bin"]  # nothing written, no staging left


def test_larger_units_lower_the_estimate_as_measured():
    """The estimate follows the unit size: 6.5 bytes a token at the default units, 5.3 at
    128M and over (where a 10B-token build wrote 5.18 at its largest pass), between them
    falling with the size; below the default, never under 6.5. A 10B-token run with a
    55G budget (its measured peak was 52.8 GB at 128M units) starts with 128M units and
    is refused at the default, its line naming the larger units and what they need."""
    sizes = [2**20, 16 * 2**20, 32 * 2**20, 64 * 2**20, 128 * 10**6, 10**9]
    per = [bytes_per_token(u) for u in sizes]
    assert per[:2] == [WORK_BYTES_PER_TOKEN, WORK_BYTES_PER_TOKEN] and per[-2:] == [5.3, 5.3]
    assert per[1] > per[2] > per[3] > per[4]
    assert work_estimate(10**10, 128 * 10**6) == 53 * 10**9
    check_fits(55 * 2**30, 10**10, 128 * 10**6)  # starts
    with pytest.raises(ConfigError) as err:
        check_fits(55 * 2**30, 10**10)
    assert "(6.50 bytes per input token)" in str(err.value)
    assert "larger units (--unit-tokens 128M: 5.30 bytes a token, about 49.4G;" in str(err.value)
    with pytest.raises(ConfigError) as small:  # one unit either way: no larger units to name
        check_fits(10**6, 10**6, 128 * 10**6)
    assert "(6.50 bytes per input token)" in str(small.value)
    assert "--unit-tokens" not in str(small.value)


def test_a_pass_that_would_go_over_stops_then_resumes_with_room(tmp_path):
    """The estimate lets it start; pass 2 writes far more per token than it, and the run
    stops once a tenth of its tokens show it: before its files pass the budget. A resume
    without the budget reuses the units counted and gives the table of a plain build,
    which is the oracle's."""
    src, docs = random_corpus(str(tmp_path / "c.bin"), N)
    budget = int(N * WORK_BYTES_PER_TOKEN * 1.5)
    with pytest.raises(OverBudget) as err:
        build_with(src, tmp_path / "t", work_budget=budget)
    line = str(err.value)
    assert line.startswith("pass 2: its work files would take about ") and "--resume" in line
    staging = [n for n in os.listdir(tmp_path) if n.endswith("fgram-staging")]
    assert staging, os.listdir(tmp_path)
    unit_bytes = sum(
        os.path.getsize(os.path.join(root, f))
        for root, _, files in os.walk(tmp_path / staging[0])
        for f in files
        if f.startswith("unit-")
    )
    assert 0 < unit_bytes <= budget  # stopped before the files passed it
    resumed = build_with(src, tmp_path / "t", resume=True)
    assert resumed["resumed"]["units_counted_before"] > 0
    plain = tmp_path / "plain"
    plain_manifest = build_with(src, plain)
    assert result(tmp_path / "t") == result(plain) == select(docs, 4, 5, 500)
    assert plain_manifest["passes"][0]["unit_bytes"] > budget  # it would have gone over


def _unit(tokens: int, nbytes: int):
    return SimpleNamespace(tokens=tokens, files={"keys": {"bytes": nbytes}})


def test_over_the_budget_by_projection_or_by_what_is_written():
    watch = PassBudget(budget=1000, k=3, tokens=100, held=100)
    watch(_unit(5, 200))
    with pytest.raises(OverBudget, match=r"^pass 3: .* over --work-budget 1000$"):
        watch(_unit(5, 50))  # a tenth of the tokens in: 100 + 250 x 10 projected
    written = PassBudget(budget=1000, k=2, tokens=100, held=0)
    with pytest.raises(OverBudget):
        written(_unit(1, 1001))  # over already, before a tenth
    under = PassBudget(budget=1000, k=2, tokens=100, held=100)
    for _ in range(10):
        under(_unit(10, 90))  # 100 + 900 at every step: at the budget, not over
    with pytest.raises(OverBudget, match="after its merge"):
        under.check_merged(1)
