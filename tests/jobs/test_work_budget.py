"""--work-budget: a build whose work files would not fit is refused before it starts, or
stopped at the pass that would go over with what it counted kept; --resume with room
gives the table a build without a budget gives."""

import os
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import build, result, write_bin
from oracle import select

from fgram.jobs.budget import WORK_BYTES_PER_TOKEN, OverBudget, PassBudget
from fgram.pipeline.errors import ConfigError

N = 200_000


def _corpus(tmp_path) -> tuple[str, list[list[int]]]:
    """Documents of random tokens (nearly every bigram distinct: a pass 2 of several
    times `WORK_BYTES_PER_TOKEN`) with a few phrases repeated in them."""
    rng = np.random.default_rng(7)
    phrases = [rng.integers(1, 60_000, size=5).tolist() for _ in range(40)]
    docs, n = [], 0
    while n < N:
        doc = rng.integers(1, 60_000, size=int(rng.integers(50, 400))).tolist()
        for _ in range(int(rng.integers(0, 4))):
            at = int(rng.integers(0, len(doc)))
            doc[at:at] = phrases[int(rng.integers(0, len(phrases)))]
        docs.append(doc)
        n += len(doc) + 1
    return write_bin(str(tmp_path / "c.bin"), docs, 0), docs


def _build(src, out, spark=None, **kw):
    opts = {"dtype": "uint16", "doc_sep": 0, "max_len": 4, "size": 500, "engine": "local"}
    return build(spark, [src], out, unit_tokens=20_000, **{**opts, **kw})


def test_a_build_over_its_budget_is_refused_before_it_starts(tmp_path):
    src, _ = _corpus(tmp_path)
    tokens = os.path.getsize(src) // 2
    with pytest.raises(ConfigError) as err:
        _build(src, tmp_path / "t", work_budget=int(tokens * WORK_BYTES_PER_TOKEN) - 1)
    assert str(err.value).startswith("--work-budget ") and "at its largest pass" in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["c.bin"]  # nothing written, no staging left


def test_a_pass_that_would_go_over_stops_then_resumes_with_room(tmp_path):
    """The estimate lets it start; pass 2 writes far more per token than it, and the run
    stops once a tenth of its tokens show it: before its files pass the budget. A resume
    without the budget reuses the units counted and gives the table of a plain build,
    which is the oracle's."""
    src, docs = _corpus(tmp_path)
    budget = int(N * WORK_BYTES_PER_TOKEN * 1.5)
    with pytest.raises(OverBudget) as err:
        _build(src, tmp_path / "t", work_budget=budget)
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
    resumed = _build(src, tmp_path / "t", resume=True)
    assert resumed["resumed"]["units_counted_before"] > 0
    plain = tmp_path / "plain"
    plain_manifest = _build(src, plain)
    assert result(tmp_path / "t") == result(plain) == select(docs, 4, 5, 500)
    assert plain_manifest["passes"][0]["unit_bytes"] > budget  # it would have gone over


@pytest.mark.spark
def test_on_spark_too_a_pass_over_its_budget_stops_then_resumes(spark, tmp_path):
    """On Spark the tasks report when their stage ends (the driver's head-start tasks as
    each finishes): the pass stops there, over the budget; the resume on Spark gives the
    oracle's table."""
    src, docs = _corpus(tmp_path)
    budget = int(N * WORK_BYTES_PER_TOKEN * 1.5)
    with pytest.raises(OverBudget, match=r"^pass 2: .* over --work-budget 1\.3M"):
        _build(src, tmp_path / "t", spark, engine="spark", work_budget=budget)
    resumed = _build(src, tmp_path / "t", spark, engine="spark", resume=True)
    assert resumed["resumed"]["units_counted_before"] > 0
    assert result(tmp_path / "t") == select(docs, 4, 5, 500)


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
