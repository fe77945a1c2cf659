"""Incremental refresh: every version equals the brute-force oracle (and `fgram build`),
whatever shards come and go; old shards are read again only for what they lack."""

import os
import shutil

import numpy as np
import pytest
from helpers import result, write_bin, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import count_ngrams, select

from fgram.jobs.refresh import driver, run_refresh, store, tasks
from fgram.jobs.refresh import stages as rstages
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.formats.reading import stream_from_lists
from fgram.pipeline.io.publish import here
from fgram.pipeline.io.workdir import load_json
from fgram.pipeline.kernels import partials as pt
from fgram.pipeline.kernels import scans
from fgram.pipeline.kernels.keys import INVALID, WIDE
from fgram.pipeline.tables import versions as vs

shard_st = st.lists(st.lists(st.integers(1, 5), max_size=25), min_size=1, max_size=6)


def _refresh(root, paths, unit=17, bound=True, **kw):
    cfg = BuildConfig(
        inputs=paths,
        output=str(root),
        engine="local",
        unit_tokens=unit,
        dtype="uint16",
        doc_sep=0,
        **kw,
    )
    return run_refresh(cfg, keep=2, bound=bound)


@settings(
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    shards=st.lists(shard_st, min_size=2, max_size=4),
    steps=st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=2, max_size=4),
    k=st.integers(2, 5),
    min_count=st.integers(1, 3),
    size=st.one_of(st.none(), st.integers(1, 30)),
    compact=st.sampled_from([0.25, 1e9]),
    chunks=st.sampled_from([1, 8]),
    unit=st.integers(3, 40),
)
def test_every_version_equals_the_oracle(
    tmp_path_factory, monkeypatch, shards, steps, k, min_count, size, compact, chunks, unit
):
    """Shards added, removed and added back in any order; the delta kept or compacted,
    the id tables' chunks merged or not."""
    monkeypatch.setattr(driver, "COMPACT", compact)
    monkeypatch.setattr(tasks, "MAX_CHUNKS", chunks)
    d = tmp_path_factory.mktemp("r")
    paths = [write_bin(str(d / f"s{i}.bin"), docs, sep=0) for i, docs in enumerate(shards)]
    for step in steps:
        chosen = [i for i, on in enumerate(step[: len(shards)]) if on] or [0]
        docs = [doc for i in chosen for doc in shards[i]]
        before = vs.current(str(d / "out"))
        if not any(docs):  # like `fgram build`: an error, and nothing published
            with pytest.raises(FgramError, match="no tokens"):
                _refresh(
                    d / "out",
                    [paths[i] for i in chosen],
                    unit=unit,
                    max_len=k,
                    min_count=min_count,
                    size=size,
                )
            assert vs.current(str(d / "out")) == before
            continue
        res = _refresh(
            d / "out",
            [paths[i] for i in chosen],
            unit=unit,
            max_len=k,
            min_count=min_count,
            size=size,
        )
        assert result(d / "out" / "current") == select(docs, k, min_count, size)
        if res["built"]:
            m = res["manifest"]
            assert m["totals"]["tokens"] == sum(len(doc) for doc in docs)
    shutil.rmtree(d)


def test_a_refresh_counts_only_new_shards_and_scans_old_ones_for_new_ids(tmp_path):
    rng = np.random.default_rng(3)
    old = [rng.integers(1, 8, 40).tolist() for _ in range(30)]
    new = [[1, 2, 3, 4, 5, 6, 7] * 3] * 12  # makes new frequent n-grams
    a = write_bin(str(tmp_path / "a.bin"), old, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), new, sep=0)
    first = _refresh(tmp_path / "out", [a], unit=400, max_len=4, min_count=4, size=60)
    units_a = first["manifest"]["passes"][0]["new_units"]
    second = _refresh(tmp_path / "out", [a, b], unit=400, max_len=4, min_count=4, size=60)
    m = second["manifest"]
    assert set(m["executor_start_seconds"]) == {"made"}  # no JVM to warm
    assert m["head_start_tasks"] == 0  # the local engine has no JVM to wait for
    assert m["refresh"] == {
        "new_shards": 1,
        "kept_shards": 1,
        "removed_shards": 0,
        "store_reused": True,
        "previous": first["version"],
    }
    assert units_a > 1 and all(p["new_units"] == 1 for p in m["passes"])  # b only
    assert any(p["scanned_grams"] > 0 for p in m["passes"])  # a, for the new ids only
    assert result(tmp_path / "out" / "current") == select(old + new, 4, 4, 60)
    # the store keeps exactly what the versions still name
    _refresh(tmp_path / "out", [b], unit=400, max_len=4, min_count=4, size=60)
    root = str(tmp_path / "out")
    assert len(vs.list_versions(root)) == 2  # --keep 2
    named = set()
    for vid in vs.list_versions(root):
        named |= store.referenced(load_json(vs.version_path(root, vid).child("store.json")))
    assert set(os.listdir(store.objects_dir(here(root)).path)) == named


def test_old_units_are_scanned_at_their_windows_without_id_or_whole_without_them(tmp_path):
    """A unit's positions of (k-1)-grams without an id, kept with its partials, are all a
    k-gram scan visits; a store without them scans whole units, an older store's
    (bigram positions only) scans whole units past k = 3: the same table every way."""
    import json

    rng = np.random.default_rng(5)
    book = [rng.integers(1, 31, 6).tolist() for _ in range(4)]
    old = [
        [t for i in rng.integers(0, 4, 6) for t in book[i]] + rng.integers(1, 31, 4).tolist()
        for _ in range(40)
    ]
    new = [d[-4:] * 6 for d in old[:10]]  # the old documents' random tails, now frequent
    a = write_bin(str(tmp_path / "a.bin"), old, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), new, sep=0)
    tables, grams, at_rare = {}, {}, {}
    for kind in ("every length", "bigrams (older store)", "none"):
        root = tmp_path / kind.split()[0]
        first = _refresh(root, [a], unit=300, max_len=4, min_count=4)
        units = first["manifest"]["passes"][0]["new_units"]
        store_json = vs.version_path(str(root), first["version"]).child("store.json")
        store = load_json(store_json)
        rare = [r for e in store["shards"].values() for r in e["rare"]]
        assert sorted(r[3] for r in rare) == [2] * units + [3] * units and units > 1
        for e in store["shards"].values():
            if kind == "none":
                del e["rare"]
            elif kind.startswith("bigrams"):
                e["rare"] = [r[:3] for r in e["rare"] if r[3] == 2]
        with open(store_json.path, "w") as f:
            json.dump(store, f)
        m = _refresh(root, [a, b], unit=300, max_len=4, min_count=4)["manifest"]
        p3, p4 = m["passes"][1], m["passes"][2]
        assert p3["scanned_units"] == p4["scanned_units"] == units
        assert p3["scanned_grams"] > 0 and p4["scanned_grams"] > 0
        at_rare[kind] = (p3["scanned_at_rare"], p4["scanned_at_rare"])
        tables[kind] = result(root / "current")
        grams[kind] = [p["scanned_grams"] for p in m["passes"]]
    assert at_rare == {
        "every length": (units, units),
        "bigrams (older store)": (units, 0),
        "none": (0, 0),
    }
    assert grams["every length"] == grams["bigrams (older store)"] == grams["none"]
    want = select(old + new, 4, 4, None)
    assert tables["every length"] == tables["bigrams (older store)"] == tables["none"] == want


def test_a_refresh_that_only_adds_starts_at_the_current_cutoff(tmp_path):
    """Counts only grow when shards are only added, so the current version's cutoff
    bounds the new one: more text of the same kind needs no scan of old shards for
    n-grams that crossed min-count (the first version's lower thresholds left ids to
    spare), and n-grams exactly at the cutoff stay in. With a shard removed, no bound."""
    rng = np.random.default_rng(1)
    book = [rng.integers(1, 40, 5).tolist() for _ in range(12)]

    def doc():  # phrases of the book between random tokens
        return [
            t
            for _ in range(6)
            for t in (
                book[rng.integers(0, 12)] if rng.random() < 0.5 else rng.integers(1, 40, 3).tolist()
            )
        ]

    old, more, tiny = [doc() for _ in range(40)], [doc() for _ in range(4)], [[9]] * 3
    a, b, c = (
        write_bin(str(tmp_path / f"{n}.bin"), docs, sep=0)
        for n, docs in (("a", old), ("b", more), ("c", tiny))
    )
    opts = dict(unit=300, max_len=4, min_count=2, size=100)
    first = _refresh(tmp_path / "out", [a], **opts)["manifest"]
    cutoff = first["cutoff_count"]
    assert first["fgrams"] == 100 and cutoff > first["passes"][1]["threshold"] == 2
    # no n-gram added (c's documents are one token long): the same cutoff, its ties kept
    m = _refresh(tmp_path / "out", [a, c], **opts)["manifest"]
    assert m["passes"][0]["count_threshold"] == cutoff == m["cutoff_count"]
    assert result(tmp_path / "out" / "current") == select(old + tiny, 4, 2, 100)
    m = _refresh(tmp_path / "out", [a, c, b], **opts)["manifest"]
    assert m["passes"][0]["count_threshold"] == cutoff
    assert sum(p["scanned_units"] for p in m["passes"]) == 0
    assert result(tmp_path / "out" / "current") == select(old + tiny + more, 4, 2, 100)
    m = _refresh(tmp_path / "out", [a, b], **opts)["manifest"]  # c removed
    assert m["passes"][0]["count_threshold"] == 2
    assert result(tmp_path / "out" / "current") == select(old + more, 4, 2, 100)
    # the same addition without the bound: a's units are scanned, the same table
    _refresh(tmp_path / "unbound", [a], bound=False, **opts)
    m = _refresh(tmp_path / "unbound", [a, b], bound=False, **opts)["manifest"]
    assert m["passes"][0]["count_threshold"] == 2
    assert sum(p["scanned_units"] for p in m["passes"]) > 0
    assert result(tmp_path / "unbound" / "current") == select(old + more, 4, 2, 100)


def test_the_store_keys_16_bit_tokens_narrowly_and_wider_tokens_start_it_afresh(tmp_path):
    """16-bit flat shards: keys of 32 + 16 bits (tokens up to 65535 kept apart from
    the prefix id); a Parquet shard (any width) starts a store of 64-bit keys."""
    rng = np.random.default_rng(4)
    words = [1, 2, 65535, 65534, 40000, 32768, 255, 256]
    docs = [[words[i] for i in rng.integers(0, len(words), 30)] for _ in range(20)]
    a = write_bin(str(tmp_path / "a.bin"), docs[:10], sep=0)
    b = write_bin(str(tmp_path / "b.bin"), docs[10:], sep=0)
    c = write_parquet(str(tmp_path / "c.parquet"), docs[:5])
    root = tmp_path / "out"
    opts = dict(unit=70, max_len=4, min_count=2, size=120)
    for paths, want in (([a], docs[:10]), ([a, b], docs), ([a, b, c], docs + docs[:5])):
        r = _refresh(root, paths, **opts)
        store = load_json(vs.version_path(str(root), r["version"]).child("store.json"))
        assert store["options"]["key_bits"] == [32, 32 if c in paths else 16]
        assert r["manifest"]["refresh"]["store_reused"] == (paths == [a, b])
        assert result(root / "current") == select(want, 4, 2, 120)


def test_other_options_start_the_store_afresh_and_parquet_works(tmp_path):
    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 4, 2, 3, 4, 1, 2]] * 4
    a = write_parquet(str(tmp_path / "a.parquet"), docs, rows_per_group=2)
    b = write_parquet(str(tmp_path / "b.parquet"), docs[:3], rows_per_group=1)
    cfg = dict(engine="local", unit_tokens=5)
    run_refresh(BuildConfig(inputs=[a], output=str(tmp_path / "o"), min_count=2, **cfg))
    other = BuildConfig(inputs=[a, b], output=str(tmp_path / "o"), min_count=3, **cfg)
    with pytest.raises(ConfigError, match="--min-count 2 -> 3.*--rebuild"):
        run_refresh(other)
    r = run_refresh(other, rebuild=True)
    assert r["rebuilt"] and r["manifest"]["refresh"]["store_reused"] is False
    assert r["manifest"]["refresh"]["new_shards"] == 2
    assert result(tmp_path / "o" / "current") == select(docs + docs[:3], 5, 3, None)


# ---------------------------------------------------------------- the kernels


def _stream(docs):
    return stream_from_lists(
        np.array([len(x) for x in docs]), np.array([t for x in docs for t in x], dtype=np.int64)
    )


@given(
    docs=st.lists(st.lists(st.integers(0, 4), max_size=30), min_size=1, max_size=6),
    k=st.integers(3, 5),
    seed=st.integers(0, 2**16),
)
def test_scan_unit_counts_exactly_the_grams_with_a_new_side(docs, k, seed):
    """T_j = random subsets of the j-grams present (j < k); 'new' = the last ids of T_{k-1}."""
    rng = np.random.default_rng(seed)
    counts = count_ngrams(docs, k)
    tables, rows_of = [], {}
    ids = {}
    for j in range(2, k):
        grams = sorted(g for g in counts if len(g) == j and (j == 2 or g[:-1] in ids))
        grams = [g for g in grams if rng.random() < 0.7]
        for i, g in enumerate(grams):
            ids[g] = i
        keys = WIDE.encode(
            np.array([g[0] if j == 2 else ids[g[:-1]] for g in grams], np.int64),
            np.array([g[-1] for g in grams], np.int64),
        )
        ids_ = np.arange(len(grams), dtype=np.uint32)
        rows = np.array(grams, np.uint32).reshape(-1, j)
        cut = len(grams) // 2  # two chunks, as after a refresh that added ids
        chunks = []
        for sl in (slice(0, cut), slice(cut, None)):
            order = np.argsort(keys[sl])
            chunks.append((keys[sl][order], ids_[sl][order], rows[sl]))
        tables.append(pt.IdTable(j, chunks))
        rows_of[j] = grams
    last = rows_of[k - 1]
    old_size = int(rng.integers(0, len(last) + 1))
    new_rows = np.array(last[old_size:], np.uint32).reshape(-1, k - 1)
    s = _stream(docs)
    keys, got = scans.scan_unit(s.tokens, s.limit, k, scans.window_set(new_rows), tables, old_size)
    want = {}
    for g, c in counts.items():
        if (
            len(g) == k
            and g[:-1] in ids
            and g[1:] in ids
            and max(ids[g[:-1]], ids[g[1:]]) >= old_size
            and len(g[:-1]) == k - 1
        ):
            want[int(WIDE.encode(np.array([ids[g[:-1]]]), np.array([g[-1]]))[0])] = c
    assert dict(zip(keys.tolist(), got.tolist())) == want
    assert list(keys) == sorted(keys)
    with pytest.MonkeyPatch.context() as mp:  # at anchored starts: the same counts
        mp.setattr(scans, "ANCHOR_SHARE", 1.0)
        starts = scans.anchored_starts(s.tokens, new_rows)
    if starts is not None:
        keys3, got3 = scans.scan_unit(
            s.tokens, s.limit, k, scans.window_set(new_rows), tables, old_size, starts
        )
        assert dict(zip(keys3.tolist(), got3.tolist())) == want
    # only at the (k-1)-grams that had no id before the new ones: the same counts
    t = s.tokens.tolist()
    w = k - 1
    at = np.full(len(t), INVALID, np.uint32)
    for p in range(len(t) - w + 1):
        window = tuple(t[p : p + w])
        if INVALID not in window and ids.get(window, old_size) < old_size:
            at[p] = ids[window]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tasks, "RARE_SHARE", 1.0)
        rare = tasks.rare_windows(s.tokens, at, w)
    assert rare is not None
    assert rare.tolist() == [
        p for p in range(len(t) - w + 1) if at[p] == INVALID and INVALID not in t[p : p + w]
    ]
    keys2, got2 = scans.scan_unit(
        s.tokens, s.limit, k, scans.window_set(new_rows), tables, old_size, rare
    )
    assert dict(zip(keys2.tolist(), got2.tolist())) == want
    # a flat file's raw values, its separator a boundary: the same counts
    raw = np.where(s.tokens == INVALID, 99, s.tokens).astype(np.uint16)
    keys_raw, got_raw = scans.scan_unit(
        raw, s.limit, k, scans.window_set(new_rows), tables, old_size, rare, sep=99
    )
    assert dict(zip(keys_raw.tolist(), got_raw.tolist())) == want
    keys_raw, got_raw = scans.scan_unit(
        raw, s.limit, k, scans.window_set(new_rows), tables, old_size, None, sep=99
    )  # every window
    assert dict(zip(keys_raw.tolist(), got_raw.tolist())) == want
    # every window without an id: kept unless that is over RARE_SHARE of them
    every = tasks.rare_windows(s.tokens, np.full(len(t), INVALID, np.uint32), w)
    valid = [p for p in range(len(t) - w + 1) if INVALID not in t[p : p + w]]
    if len(valid) > tasks.RARE_SHARE * max(len(t) - w + 1, 0):
        assert every is None
    else:
        assert every is not None and every.tolist() == valid


@given(
    tokens=st.lists(st.one_of(st.integers(0, 30), st.just(int(INVALID))), max_size=300),
    w=st.integers(2, 7),
    picks=st.lists(st.integers(0, 300), max_size=5),
    extra=st.lists(st.lists(st.integers(0, 40), min_size=7, max_size=7), max_size=3),
    share=st.sampled_from([1 / 32, 1.0]),
)
def test_anchored_starts_include_every_place_a_row_occurs(tokens, w, picks, extra, share):
    """Rows: windows taken from the unit (so they occur) and random ones; every start of
    an occurrence must be among the anchored starts (when they are not given up)."""
    t = np.array(tokens, np.uint32)
    wins = [tuple(tokens[p : p + w]) for p in picks if p + w <= len(tokens)]
    wins = [x for x in wins if int(INVALID) not in x] + [tuple(e[:w]) for e in extra]
    rows = np.array(wins, np.uint32).reshape(-1, w)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scans, "ANCHOR_SHARE", share)
        mp.setattr(scans, "ANCHOR_STRIDE", 3)
        got = scans.anchored_starts(t, rows)
    if got is None:
        return
    want = {p for p in range(len(tokens) - w + 1) if tuple(tokens[p : p + w]) in set(wins)}
    assert want <= set(got.tolist())
    assert all(0 <= p <= len(tokens) - w for p in got.tolist())


def test_anchored_starts_find_a_rare_window_in_a_long_unit():
    """A unit of common tokens and two rows holding a rare one: a few starts, not a scan."""
    rng = np.random.default_rng(0)
    t = rng.integers(0, 20, 200_000).astype(np.uint32)
    t[[1000, 150_000]] = 500
    rows = np.array([t[998:1002], t[149_999:150_003]], np.uint32)
    got = scans.anchored_starts(t, rows)
    assert got is not None and {998, 149_999} <= set(got.tolist()) and len(got) <= 8
    assert scans.anchored_starts(t, np.array([[1, 2, 3, 4]], np.uint32)) is None  # all common


@given(
    base=st.dictionaries(st.integers(0, 50), st.integers(1, 9)),
    delta=st.dictionaries(st.integers(0, 50), st.integers(-3, 9)),
    fresh=st.dictionaries(st.integers(0, 50), st.integers(1, 3)),
    floor=st.integers(1, 8),
    chunk=st.sampled_from([1, 3, 1 << 22]),
)
def test_combine_equals_a_dict_sum(base, delta, fresh, floor, chunk):
    delta = {k: v for k, v in delta.items() if v != 0 and base.get(k, 0) + v >= 0}

    def run(d):
        keys = np.array(sorted(d), np.uint64)
        return keys, np.array([d[int(k)] for k in keys], np.int64)

    with pytest.MonkeyPatch.context() as mp:  # base merged in chunks of `chunk` entries
        mp.setattr(pt, "COMBINE_CHUNK", chunk)
        keys, counts, fr = pt.combine(run(base), run(delta), run(fresh), floor)
    total = {k: base.get(k, 0) + delta.get(k, 0) for k in set(base) | set(delta)}
    want = {k: c for k, c in total.items() if c >= floor}
    assert dict(zip(keys.tolist(), counts.tolist())) == want
    assert fr.tolist() == [fresh.get(int(k), 0) for k in keys]
    assert keys.tolist() == sorted(keys.tolist())


def test_combine_refuses_a_negative_total():
    one = (np.array([5], np.uint64), np.array([2], np.int64))
    with pytest.raises(ValueError, match="negative"):
        pt.combine(one, (one[0], np.array([-3], np.int64)), one, 1)


def test_a_shard_changed_in_place_is_subtracted_and_recounted(tmp_path):
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3]] * 5, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[2, 3, 4, 2, 3, 4]] * 5, sep=0)
    _refresh(tmp_path / "out", [a, b], min_count=2, max_len=4)
    st = os.stat(a)
    write_bin(a, [[3, 2, 1, 3, 2, 1]] * 5, sep=0)  # same size, same mtime
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = _refresh(tmp_path / "out", [a, b], min_count=2, max_len=4)
    assert (
        r["manifest"]["refresh"]["new_shards"],
        r["manifest"]["refresh"]["removed_shards"],
        r["manifest"]["refresh"]["kept_shards"],
    ) == (1, 1, 1)
    assert result(tmp_path / "out" / "current") == select(
        [[3, 2, 1, 3, 2, 1]] * 5 + [[2, 3, 4, 2, 3, 4]] * 5, 4, 2, None
    )


def test_a_failed_refresh_publishes_nothing_and_its_objects_are_collected(tmp_path, monkeypatch):
    docs = [[1, 2, 3, 1, 2, 3, 4]] * 6
    a = write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[4, 3, 2, 1, 4, 3, 2, 1]] * 6, sep=0)
    root = str(tmp_path / "out")
    first = _refresh(root, [a], min_count=2, max_len=4)["version"]
    real = tasks.table_task

    def fail_at_3(**args):
        if args["k"] == 3:
            raise RuntimeError("boom")
        return real(**args)

    monkeypatch.setattr(rstages.TableStage, "call", staticmethod(fail_at_3))
    with pytest.raises(RuntimeError, match="boom"):
        _refresh(root, [a, b], min_count=2, max_len=4)
    assert vs.current(root) == first and vs.list_versions(root) == [first]
    assert result(os.path.join(root, "current")) == select(docs, 4, 2, None)
    assert not [n for n in os.listdir(os.path.join(root, "versions")) if n.startswith(".")]
    named = store.referenced(load_json(vs.version_path(root, first).child("store.json")))
    assert (
        set(os.listdir(store.objects_dir(here(root)).path)) == named
    )  # the failed run's: collected
    monkeypatch.setattr(rstages.TableStage, "call", staticmethod(real))
    r = _refresh(root, [a, b], min_count=2, max_len=4)
    assert r["collected"] == 0 and result(os.path.join(root, "current")) == select(
        docs + [[4, 3, 2, 1, 4, 3, 2, 1]] * 6, 4, 2, None
    )
    named = set()
    for vid in vs.list_versions(root):
        named |= store.referenced(load_json(vs.version_path(root, vid).child("store.json")))
    assert set(os.listdir(store.objects_dir(here(root)).path)) == named


def test_leftovers_of_a_killed_refresh_are_removed(tmp_path):
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 1, 2, 1, 2]] * 3, sep=0)
    root = str(tmp_path / "out")
    _refresh(root, [a], min_count=2)
    crash = os.path.join(root, "versions", ".20991231T000000Z-dead00.fgram-staging")
    os.makedirs(os.path.join(crash, "_work"))
    (tmp_path / "b.bin").write_bytes(open(a, "rb").read()[::-1])
    _refresh(root, [a, str(tmp_path / "b.bin")], min_count=2)
    assert not os.path.exists(crash) and len(vs.list_versions(root)) == 2


@given(
    n=st.integers(0, 3000),
    nq=st.integers(0, 400),
    split=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
def test_id_table_lookup_by_binary_search_or_merge_equals_a_dict(n, nq, split, seed):
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64))
    ids = rng.permutation(len(keys)).astype(np.uint32)
    cut = int(len(keys) * split)
    chunks = [
        (keys[:cut], ids[:cut], np.zeros((cut, 2), np.uint32)),
        (keys[cut:], ids[cut:], np.zeros((len(keys) - cut, 2), np.uint32)),
    ]
    queries = np.sort(
        np.concatenate(
            [
                rng.choice(keys, min(nq, len(keys))) if len(keys) else pt.EMPTY_KEYS,
                rng.integers(0, 2**64 - 1, nq, np.uint64),
            ]
        )
    )
    table = dict(zip(keys.tolist(), ids.tolist()))
    got = pt.IdTable(2, chunks).lookup(queries).tolist()
    assert got == [table.get(q, int(INVALID)) for q in queries.tolist()]


def test_parquet_shards_old_ones_scanned_for_new_ids(tmp_path):
    """Old Parquet shards (several row groups, units of 2 groups) are read again for the
    n-grams that became frequent; the versions equal the oracle."""
    rng = np.random.default_rng(11)
    old = [rng.integers(1, 6, rng.integers(0, 30)).tolist() for _ in range(40)]
    new = [[1, 2, 3, 4, 5, 1, 2, 3, 4, 5]] * 3 + old[:10]
    a = write_parquet(str(tmp_path / "a.parquet"), old, rows_per_group=4)
    b = write_parquet(str(tmp_path / "b.parquet"), new, rows_per_group=4)
    cfg = dict(engine="local", unit_tokens=2, max_len=5, min_count=3, size=40)
    run_refresh(BuildConfig(inputs=[a], output=str(tmp_path / "o"), **cfg))
    r = run_refresh(BuildConfig(inputs=[a, b], output=str(tmp_path / "o"), **cfg))
    assert r["manifest"]["refresh"]["kept_shards"] == 1
    assert sum(p["scanned_grams"] for p in r["manifest"]["passes"]) > 0
    assert result(tmp_path / "o" / "current") == select(old + new, 5, 3, 40)
