"""The select stage past the broadcast budget (decode by key range) and rank tasks that
split a big (count, length) group by lead key: the broadcast path's table, exactly."""

import numpy as np
import pytest
from helpers import build, result, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import select

from fgram.pipeline.kernels.layout import Layout, boundaries, lead_key, sample
from fgram.pipeline.kernels.ranking import Groups

SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
docs_st = st.lists(st.lists(st.integers(0, 5), max_size=50), min_size=1, max_size=12)


@pytest.mark.spark
@SETTINGS
@given(
    docs=docs_st,
    k=st.integers(2, 5),
    size=st.one_of(st.none(), st.integers(1, 60)),
    ranges=st.integers(1, 5),
    rank_rows=st.integers(1, 9),
)
def test_decode_by_key_range_and_split_groups_match_the_oracle(
    spark, tmp_path_factory, docs, k, size, ranges, rank_rows
):
    """Budget 0 (decode by key range, ``ranges`` key ranges per pass) and rank tasks of
    at most ``rank_rows`` rows per group part: the oracle's table."""
    if not any(docs):
        docs = docs + [[1, 2]]
    d = tmp_path_factory.mktemp("sel")
    write_parquet(str(d / "a.parquet"), docs, rows_per_group=3)
    opts = {"max_len": k, "min_count": 2, "size": size, "unit_tokens": 20}
    m = build(
        spark,
        [d / "a.parquet"],
        d / "r",
        broadcast_budget=0,
        key_ranges=ranges,
        rank_rows=rank_rows,
        **opts,
    )
    assert result(d / "r") == select(docs, k, 2, size)
    assert m["select"]["decode"] == ("ranges" if m["fgrams"] else "broadcast")  # nothing held
    assert {p["partitions"] for p in m["passes"]} <= set(range(ranges, ranges + 3))


@pytest.mark.spark
def test_a_cutoff_group_of_ties_split_over_tasks(spark, tmp_path):
    """Every bigram of 0..29 and every trigram occurs 3 times: the cutoff falls inside one
    big group of ties, which rank tasks of 4 rows split by lead key; both decodes give
    the oracle's table (its first rows by token ids)."""
    docs = [list(range(30))] * 3 + [[40, 41, 42, 40, 41, 42, 40, 41, 42, 40, 41]]
    write_parquet(str(tmp_path / "a.parquet"), docs)
    expect = select(docs, 3, 2, 41)
    for budget in (0, 1 << 30):
        out = tmp_path / f"o{budget}"
        m = build(
            spark,
            [tmp_path / "a.parquet"],
            out,
            max_len=3,
            min_count=2,
            size=41,
            rank_rows=4,
            broadcast_budget=budget,
        )
        assert result(out) == expect
        assert m["select"]["split_groups"] >= 1 and m["select"]["rank_tasks"] > 8


def test_layout_isolates_and_splits_big_groups():
    # groups (count desc, length asc): sizes 3, 10, 2, 25 (the cutoff group, 12 selected)
    hists = {2: {9: 3, 5: 2, 4: 25}, 3: {9: 10}}
    groups = Groups(hists, cutoff=4, cut_len=2)
    assert groups.size.tolist() == [3, 10, 2, 25]
    layout = Layout.plan(groups, parallelism=2, selected=27, rank_rows=5)
    assert layout.split == {
        int(np.searchsorted(layout.firsts, 1)): 2,
        int(np.searchsorted(layout.firsts, 3)): 3,
    }
    for g in (1, 3):  # alone in their slots
        s = int(np.searchsorted(layout.firsts, g))
        assert layout.groups_of(s, 4) == (g, g + 1)
    tasks = layout.tasks()
    assert tasks == sorted(tasks) and len(tasks) == len(layout.firsts) + 1 + 2
    assert layout.slot_of(np.array([0, 1, 2, 3])).tolist() == [
        int(np.searchsorted(layout.firsts, g, side="right")) - 1 for g in range(4)
    ]


def test_boundaries_split_rows_evenly_and_in_order():
    rng = np.random.default_rng(0)
    parts = [np.sort(rng.integers(0, 1 << 40, n).astype(np.uint64)) for n in (5000, 300, 0, 12000)]
    bounds = boundaries([(len(p), sample(p)) for p in parts], 4)
    assert len(bounds) == 3 and np.all(np.diff(bounds.astype(np.float64)) >= 0)
    every = np.sort(np.concatenate(parts))
    shares = np.diff(np.searchsorted(every, np.concatenate([[0], bounds, [1 << 63]])))
    assert shares.sum() == len(every) and shares.min() > 0.2 * len(every)
    assert len(boundaries([(0, np.zeros(0, np.uint64))], 3)) == 2
    assert len(boundaries([(10, sample(every))], 1)) == 0


def test_lead_keys_order_rows_as_their_tokens_do():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 2**32, (500, 3), dtype=np.uint64).astype(np.uint32)
    tokens[:100, :2] = tokens[0, :2]  # ties in the first two tokens
    keys = lead_key(tokens)
    by_tokens = np.lexsort(tokens.T[::-1])
    assert np.all(np.diff(keys[by_tokens].astype(np.float64)) >= 0)
    assert len(np.unique(keys)) == len({tuple(t[:2]) for t in tokens.tolist()})
