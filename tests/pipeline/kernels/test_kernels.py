"""Kernels against brute force, on numpy arrays (no Spark)."""

from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fgram.pipeline.formats.reading import stream_from_lists
from fgram.pipeline.io.publish import here
from fgram.pipeline.kernels.counting import ids_at, unit_table
from fgram.pipeline.kernels.keys import INVALID, WIDE, KeyCode, mix, ngram_keys, unmix
from fgram.pipeline.kernels.merging import (
    ids_in,
    key_slice,
    lookup_sorted,
    merge_counts,
    merge_counts_bucketed,
    part_bounds,
    part_range,
)
from fgram.pipeline.kernels.selection import histogram, kth_largest

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.lists(u64, max_size=200))
def test_mix_is_a_bijection(values):
    x = np.array(values, dtype=np.uint64)
    assert np.array_equal(unmix(mix(x)), x)
    assert len(np.unique(mix(x))) == len(np.unique(x))


@given(st.integers(1, 32), st.integers(1, 32), st.data())
def test_key_code_round_trip_and_order(prefix_bits, last_bits, data):
    """A KeyCode is a bijection of (prefix, last) pairs into the top bits; WIDE is `mix`."""
    if prefix_bits + last_bits < 8:
        prefix_bits = 8 - last_bits
    code = KeyCode(prefix_bits, last_bits)
    pairs = data.draw(
        st.lists(
            st.tuples(st.integers(0, 2**prefix_bits - 1), st.integers(0, 2**last_bits - 1)),
            max_size=60,
        )
    )
    p = np.array([a for a, _ in pairs], dtype=np.int64)
    t = np.array([b for _, b in pairs], dtype=np.int64)
    keys = code.encode(p, t)
    assert np.all(keys & np.uint64(2**code.up - 1) == 0)  # the bits below the key: free
    back_p, back_t = code.decode(keys)
    assert back_p.tolist() == p.tolist() and back_t.tolist() == t.tolist()
    assert len(np.unique(keys)) == len(set(pairs))
    wide = (p.astype(np.uint64) << np.uint64(32)) | t.astype(np.uint64)
    assert np.array_equal(WIDE.encode(p, t), mix(wide))


def test_key_code_fitting():
    assert KeyCode.fitting(65535, 50000) == KeyCode(16, 16)
    assert KeyCode.fitting(0, 0) == KeyCode(7, 1)
    assert KeyCode.fitting(2**32 - 2, 2**31 - 1) == KeyCode(32, 31)


@given(st.lists(st.integers(0, 2**20), max_size=300), st.lists(st.integers(0, 2**20), max_size=100))
def test_sorted_lookup(table_vals, queries):
    table = np.unique(mix(np.array(table_vals, dtype=np.uint64)))
    q = mix(np.array(queries + table_vals[:20], dtype=np.uint64))
    qs = np.sort(q)
    expect_sorted = [
        int(np.flatnonzero(table == v)[0]) if v in set(table.tolist()) else -1 for v in qs.tolist()
    ]
    assert lookup_sorted(table, qs).tolist() == expect_sorted
    ids = ids_in(table, qs, 7)
    assert ids.dtype == np.uint32
    assert ids.tolist() == [i + 7 if i >= 0 else int(INVALID) for i in expect_sorted]


@given(
    st.lists(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 5)), max_size=30), max_size=9)
)
def test_merge_counts(runs):
    parts, expect = [], Counter()
    for run in runs:
        c = Counter()
        for key, n in run:
            c[key] += n
        keys = np.array(sorted(c), dtype=np.uint64)
        parts.append((keys, np.array([c[k] for k in sorted(c)], dtype=np.uint32)))
        expect.update(c)
    keys, counts = merge_counts(parts)
    assert dict(zip(keys.tolist(), counts.tolist())) == dict(expect)


@given(st.integers(1, 32), st.integers(1, 32), st.integers(1, 5), st.integers(1, 64), st.data())
def test_merge_counts_bucketed(prefix_bits, last_bits, nparts, bucket, data):
    """The one-sort merge of a key range equals a Counter, for any code (wide ones fall
    back to pairwise merges), range and bucket size."""
    if prefix_bits + last_bits < 8:
        last_bits = 8 - prefix_bits
    code = KeyCode(prefix_bits, last_bits)
    pair = st.tuples(st.integers(0, 2**prefix_bits - 1), st.integers(0, 2**last_bits - 1))
    runs = data.draw(
        st.lists(st.lists(st.tuples(pair, st.integers(1, 2**32 - 1)), max_size=40), max_size=6)
    )
    p = data.draw(st.integers(0, nparts - 1))
    bounds = [int(b) for b in part_bounds(nparts)] + [2**64]
    lo, hi = bounds[p], bounds[p + 1]
    parts, expect = [], Counter()
    for run in runs:
        c = Counter()
        for (a, b), n in run:
            key = int(code.encode(np.array([a]), np.array([b]))[0])
            if lo <= key < hi:
                c[key] = n  # one count per key and run, as a unit's table has
        keys = sorted(c)
        parts.append((np.array(keys, dtype=np.uint64), np.array([c[x] for x in keys], np.uint32)))
        expect.update(c)
    keys, counts = merge_counts_bucketed(parts, code, lo, hi, bucket=bucket)
    assert keys.tolist() == sorted(expect)
    assert counts.tolist() == [expect[x] for x in sorted(expect)]


docs_strategy = st.lists(st.lists(st.integers(0, 6), max_size=25), max_size=8)


def test_estimated_buckets_and_their_fallback(monkeypatch):
    """Buckets sized from a sample of positions are used when nothing overflows them; a
    corpus periodic in the sample step (the sample sees one bigram) overfills a bucket and
    the unit is counted again with exact sizes. Both give the brute-force table."""
    from fgram.pipeline.kernels import counting as cc

    exact_counts = []  # histograms of every position (step 1)
    real = cc.candidate_histogram
    monkeypatch.setattr(
        cc, "candidate_histogram", lambda *a: (a[1] == 1 and exact_counts.append(1)) or real(*a)
    )
    rng = np.random.default_rng(5)
    for toks, expect_exact in (
        (rng.integers(0, 50, 20_000), False),
        (np.tile(np.arange(1, 9), 2_500), True),
    ):
        toks = toks.astype(np.uint32)
        exact_counts.clear()
        code = KeyCode.fitting(60, 60)
        uniq, counts, order, counted = unit_table(
            toks, toks, 2, len(toks), True, code=code, bucket=64, sample=8, sample_from=0
        )
        assert bool(exact_counts) == expect_exact
        pos, keys = ngram_keys(toks, toks, 2, code)
        assert dict(zip(uniq.tolist(), counts.tolist())) == dict(Counter(keys.tolist()))
        assert counted == len(keys)
        positions, starts = order
        dense = ids_at(np.arange(len(uniq)), order, len(toks))
        assert np.array_equal(uniq[dense[pos]], keys) and starts[-1] == len(positions)


@given(docs_strategy)
def test_bigram_keys_respect_document_boundaries(docs):
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    values = np.array([t for d in docs for t in d], dtype=np.int64)
    stream = stream_from_lists(lengths, values)
    pos, keys = ngram_keys(stream.tokens, stream.tokens, 2)
    first, last = WIDE.decode(keys)
    got = Counter(zip(first.tolist(), last.tolist()))
    expect = Counter((d[i], d[i + 1]) for d in docs for i in range(len(d) - 1))
    assert got == expect
    assert stream.documents == len(docs) and stream.n_tokens == len(values)


@given(
    docs_strategy,
    st.integers(0, 40),
    st.integers(1, 9),
    st.booleans(),
    st.integers(2, 4),
    st.sampled_from([1, 40, 62]),
    st.sampled_from(["wide", "fitting", "exact-off"]),
    st.sampled_from([0, 1, 3, 7]),
)
def test_unit_table_limit_buckets_and_inverse(
    docs, limit, bucket, want_inverse, k, lo_bits, how, sample
):
    """Counts only owned starts, keeps overlap keys (for the order); any bucketing gives
    the same table, on the exact path (key bits + position in one uint64, or without an
    order the key bits alone in one uint32) and the indirect one, also when
    the keys' packed top bits tie there (62 low bits: only 2 top bits compared), and with
    bucket sizes estimated from every ``sample``-th position (a bucket overfilled: counted
    again exactly)."""
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    values = np.array([t for d in docs for t in d], dtype=np.int64)
    stream = stream_from_lists(lengths, values)
    toks = stream.tokens
    prev = toks
    for j in range(2, k):  # ids of (j)-grams: any injective labelling will do here
        pos, keys = ngram_keys(prev, toks, j)
        uniq, _, order, _ = unit_table(prev, toks, j, len(toks), True)
        prev = ids_at(np.arange(len(uniq)), order, len(toks))
    ids = prev[prev != INVALID]
    code = WIDE if how == "wide" else KeyCode.fitting(ids.max(initial=0), 6)
    pos, keys = ngram_keys(prev, toks, k, code)
    uniq, counts, order, counted = unit_table(
        prev,
        toks,
        k,
        limit,
        want_inverse,
        code=code,
        bucket=bucket,
        min_lo_bits=lo_bits,
        exact=how != "exact-off",
        sample=sample,
        sample_from=0,
    )
    assert np.all(np.diff(uniq.astype(np.float64)) > 0) or len(uniq) < 2
    # the overlap's keys (count 0) too where the order is asked for: the next pass needs
    # their ids; without it, only where the one-word paths do not apply
    assert set(keys[pos < limit].tolist()) <= set(uniq.tolist()) <= set(keys.tolist())
    if want_inverse or how == "exact-off":
        assert set(uniq.tolist()) == set(keys.tolist())
    own = Counter(keys[pos < limit].tolist())
    assert {key: c for key, c in zip(uniq.tolist(), counts.tolist()) if c} == dict(own)
    assert counted == sum(own.values())
    if want_inverse:
        positions, starts = order
        assert starts[0] == 0 and starts[-1] == len(positions) == len(pos)
        assert sorted(positions.tolist()) == pos.tolist()
        dense = ids_at(np.arange(len(uniq)), order, len(toks))
        assert np.array_equal(uniq[dense[pos]], keys)
        others = np.setdiff1d(np.arange(len(dense)), pos)
        assert np.all(dense[others] == INVALID)
    else:
        assert order is None


def test_histogram_and_kth_largest():
    h = histogram(np.array([1, 5, 5, 7, 9, 9, 9]), floor=5)
    assert h == {5: 2, 7: 1, 9: 3}
    assert kth_largest(h, 1) == 9 and kth_largest(h, 3) == 9
    assert kth_largest(h, 4) == 7 and kth_largest(h, 6) == 5
    assert kth_largest(h, 7) is None


def test_key_ranges_partition_the_keys():
    """The merge tasks' key ranges cover every key exactly once, in order."""
    keys = np.sort(mix(np.arange(1000, dtype=np.uint64)))
    for n in (1, 2, 3, 7):
        bounds = [key_slice(keys, *part_range(n, p)) for p in range(n)]
        assert bounds[0][0] == 0 and bounds[-1][1] == len(keys)
        assert all(bounds[p][1] == bounds[p + 1][0] for p in range(n - 1))
        assert all(b - a > 50 for a, b in bounds)  # the mix balances the ranges


@given(
    rows=st.lists(st.tuples(st.integers(1, 9), st.integers(2, 4)), max_size=60),
    cutoff=st.integers(1, 9),
    cut_len=st.integers(0, 4),
    target=st.integers(1, 20),
)
def test_groups_rows_in_a_rank_task_are_exactly_its_groups(rows, cutoff, cut_len, target):
    from fgram.pipeline.kernels.ranking import Groups

    hists: dict = {}
    for c, k in rows:
        hists.setdefault(k, {}).setdefault(c, 0)
        hists[k][c] += 1
    groups = Groups(hists, cutoff, cut_len)
    firsts = groups.split(target)
    pairs = list(zip(groups.count.tolist(), groups.length.tolist()))
    for r in range(len(firsts)):
        g0 = int(firsts[r])
        g1 = int(firsts[r + 1]) if r + 1 < len(firsts) else len(groups.size)
        for k in (2, 3, 4):
            counts = np.array([c for c, kk in rows if kk == k], np.int64)
            for table_max in (1 << 22, 2, -1):  # a count table, or binary searches
                got = groups.rows_in(counts, k, g0, g1, table_max).tolist()
                assert got == [(c, k) in pairs[g0:g1] for c in counts.tolist()]


@given(
    rows=st.lists(st.tuples(st.integers(1, 60), st.integers(2, 4)), min_size=1, max_size=60),
    cutoff=st.integers(0, 9),
    table_max=st.sampled_from([1 << 20, 5, 1]),
)
def test_groups_index_is_each_rows_group(rows, cutoff, table_max):
    """A count table over the lowest counts of a length (of at most ``table_max``
    counts), binary searches above it: each row's (count, length) group."""
    from fgram.pipeline.kernels.ranking import Groups

    hists: dict = {}
    for c, k in rows:
        hists.setdefault(k, {}).setdefault(c, 0)
        hists[k][c] += 1
    groups = Groups(hists, cutoff, 0)
    pairs = list(zip(groups.count.tolist(), groups.length.tolist()))
    for k in (2, 3, 4):
        counts = np.array([c for c, kk in rows if kk == k and c > cutoff], np.int64)
        got = groups.index(counts, k, table_max).tolist()
        assert got == [pairs.index((c, k)) for c in counts.tolist()]


@given(n=st.integers(0, 50), k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_row_kernels_extend_and_take_rows_as_numpy_does(n, k, seed):
    from fgram.pipeline.kernels.ranking import extend_rows, take_rows

    rng = np.random.default_rng(seed)
    table = rng.integers(0, 2**32, (max(n, 1), k), dtype=np.uint64).astype(np.uint32)
    rows = rng.integers(0, len(table), n)
    last = rng.integers(0, 2**16, n).astype(np.uint16)
    out = np.empty((n, k + 1), np.uint32)
    extend_rows(table, rows, last, out)
    want = np.concatenate([table[rows], last[:, None].astype(np.uint32)], axis=1)
    assert np.array_equal(out, want)
    order = rng.permutation(n)
    assert np.array_equal(take_rows(want, order), want[order])


@given(n=st.integers(1, 200), k=st.integers(2, 8), small=st.booleans(), seed=st.integers(0, 2**16))
def test_rank_order_is_count_desc_then_tokens(n, k, small, seed):
    """Against a lexsort of every column: wide and narrow tokens, ties on leading tokens."""
    from fgram.pipeline.kernels.ranking import rank_order

    rng = np.random.default_rng(seed)
    top = 3 if small else 2**31 - 1
    toks = np.unique(rng.integers(0, top + 1, (n, k)).astype(np.uint32), axis=0)
    counts = rng.integers(1, 4 if small else 1000, len(toks)).astype(np.int64)
    want = np.lexsort([toks[:, j] for j in range(k - 1, -1, -1)] + [-counts])
    assert rank_order(toks, counts).tolist() == want.tolist()


@given(counts=st.lists(st.one_of(st.integers(1, 40), st.integers(1, 2**40)), max_size=60))
def test_dense_rank_desc_equals_the_rank_among_distinct_counts(counts):
    """A count table over a narrow range, np.unique over a wide one: the same ranks."""
    from fgram.pipeline.kernels.ranking import dense_rank_desc

    c = np.array(counts, np.int64)
    distinct = sorted(set(counts), reverse=True)
    rank, n = dense_rank_desc(c)
    assert n == len(distinct)
    assert rank.tolist() == [distinct.index(x) for x in counts]


@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=40),
    tasks=st.integers(1, 12),
    cut=st.integers(0, 2000),
)
def test_groups_split_cuts_near_equal_shares(sizes, tasks, cut):
    from fgram.pipeline.kernels.ranking import Groups

    hists = {2: {c + 1: n for c, n in enumerate(sizes)}}
    groups = Groups(hists, 0, 0)
    rows = min(cut, int(groups.start[-1])) or int(groups.start[-1])
    firsts = groups.split(tasks, rows)
    assert firsts[0] == 0 and len(firsts) <= tasks and (np.diff(firsts) > 0).all()
    assert (groups.start[firsts] < rows).all()  # no task past the selection
    per = np.diff(np.minimum(np.append(groups.start[firsts], rows), rows))
    assert per.sum() == rows and per.max() <= rows / tasks + max(sizes)


@given(
    data=st.data(),
    tasks=st.integers(1, 6),
    size=st.integers(1, 120),
    top=st.sampled_from([3, 2**16 - 1, 2**31 - 1]),
)
def test_rank_tasks_write_the_table_a_full_sort_gives(tmp_path_factory, data, tasks, size, top):
    """Rows of lengths 2..6 split into rank tasks of whole groups, each written by
    `write_ranked`: together, the first S rows by (count desc, length, tokens), numbered.
    Tokens of 2, 16 and 31 bits from few values: rows tie on the leading tokens that
    fit one sort word."""
    import pyarrow.parquet as pq

    from fgram.pipeline.formats.table import write_ranked
    from fgram.pipeline.kernels.ranking import Groups
    from fgram.pipeline.kernels.selection import selection

    rows = {}
    for k in range(2, 7):
        toks = data.draw(
            st.lists(st.tuples(*[st.sampled_from([0, 1, 2, top])] * k), unique=True, max_size=40)
        )
        counts = data.draw(st.lists(st.integers(1, 6), min_size=len(toks), max_size=len(toks)))
        rows[k] = (np.array(toks, np.uint32).reshape(-1, k), np.array(counts, np.int64))
    want = sorted(
        ((-int(c), k, tuple(t.tolist())) for k, (ts, cs) in rows.items() for t, c in zip(ts, cs))
    )[:size]
    hists = {k: dict(Counter(cs.tolist())) for k, (_, cs) in rows.items() if len(cs)}
    cutoff, cut_len, selected, _ = selection(hists, size)
    groups = Groups(hists, cutoff, cut_len)
    firsts = groups.split(tasks, selected)
    out = tmp_path_factory.mktemp("rank")
    got = []
    for r in range(len(firsts)):
        g0, g1, lo, hi = groups.task_span(firsts, r, selected)
        mine = {}
        for k, (ts, cs) in rows.items():
            m = groups.rows_in(cs, k, g0, g1)
            mine[k] = (ts[m], cs[m])
        assert write_ranked(mine, groups, lo, hi, here(str(out / f"{r}.parquet"))) == max(
            hi - lo, 0
        )
        got += pq.read_table(out / f"{r}.parquet").to_pylist()
    assert [row["fgram_id"] for row in got] == list(range(len(want)))
    assert [(-row["count"], row["length"], tuple(row["tokens"])) for row in got] == want


@given(n=st.integers(0, 10_000), unit=st.integers(1, 3000))
def test_flat_shards_split_into_the_fewest_units_of_equal_size(n, unit):
    from fgram.pipeline.formats.inputs import plan_units
    from fgram.pipeline.formats.reading import Shard

    units = plan_units([Shard("a.bin", "flat", 2 * n, None, "<u2", n_items=n)], unit)
    sizes = [u.stop - u.start for u in units]
    assert len(units) == -(-n // unit)
    assert [u.start for u in units] == ([0] if units else []) + [u.stop for u in units[:-1]]
    assert sum(sizes) == n and all(0 < s <= unit for s in sizes)
    assert not sizes or max(sizes) - min(sizes) <= 1


@given(
    parts=st.lists(st.lists(st.lists(st.integers(0, 65535), max_size=6), max_size=5), max_size=4),
    dtype=st.sampled_from(["uint16", "uint32"]),
    sep=st.integers(0, 65535),
)
def test_flat_shard_bytes_are_each_document_followed_by_the_separator(
    tmp_path_factory, parts, dtype, sep
):
    from fgram.pipeline.text.token_shards import write_bin

    given_parts = [
        (
            np.array([len(d) for d in docs], np.int64),
            np.array([t for d in docs for t in d], np.uint32),
        )
        for docs in parts
    ]
    path = str(tmp_path_factory.mktemp("bin") / "s.bin")
    write_bin(path, given_parts, dtype, sep)
    want = [t for docs in parts for d in docs for t in [*d, sep]]
    assert open(path, "rb").read() == np.array(want, np.dtype(dtype).newbyteorder("<")).tobytes()


def test_an_interpreted_kernel_is_the_compiled_kernels_code():
    """`jit.interpreted` runs a kernel's own Python (the kernels it calls too) with no
    compiled code: equal results, and a kernel without numba is itself."""
    from fgram.pipeline.kernels import jit, keys

    ids = np.arange(1000, dtype=np.uint64) * np.uint64(2654435761)
    py = jit.interpreted(keys.chain_key1)
    assert py is not keys.chain_key1 and py.__code__ is keys.chain_key1.py_func.__code__
    with np.errstate(over="ignore"):
        got = [py(int(a), 7) for a in ids[:50]]
    assert got == [keys.chain_key1(int(a), 7) for a in ids[:50]]
    assert jit.interpreted(len) is len
    from fgram.pipeline.kernels.matching import gather_rows

    matrix = np.random.default_rng(0).integers(1, 2**16, (50, 8)).astype(np.uint16)  # bits
    ids = np.array([3, -1, 49, 0, -1, 7], np.int64)
    out = [np.full((6, 8), 9, np.uint16) for _ in range(2)]
    gather_rows(matrix, ids, out[0])
    jit.interpreted(gather_rows)(matrix, ids, out[1])
    assert np.array_equal(out[0], out[1]) and not out[1][1].any()
