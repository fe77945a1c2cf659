"""Merging sorted runs of (key, count): summed tables, joins of sorted keys, and the
equal key ranges that split a pass's keys between tasks."""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.counting import BUCKET, bucket_bounds, sort_buckets
from fgram.pipeline.kernels.jit import Array, I64s, U32s, U64s, compiled
from fgram.pipeline.kernels.keys import INVALID, KeyCode
from fgram.pipeline.kernels.scratch import Scratch, work_array


def lookup_sorted(table: np.ndarray, sorted_queries: np.ndarray) -> np.ndarray:
    """Index of each (sorted) query in a sorted table, -1 where absent.

    Both sorted: one linear merge-join pass (compiled), no binary searches.
    """
    out = np.empty(len(sorted_queries), np.int64)
    join_sorted(
        np.ascontiguousarray(table, np.uint64),
        np.ascontiguousarray(sorted_queries, np.uint64),
        0,
        -1,
        out,
    )
    return out


def ids_in(
    table: np.ndarray, sorted_queries: np.ndarray, offset: int = 0, out: np.ndarray | None = None
) -> np.ndarray:
    """uint32 ``offset`` + index of each (sorted) query in a sorted table, INVALID where
    absent (`lookup_sorted` with the id array made in the same pass). ``offset`` + the
    table's length must stay below INVALID. ``out``: where to write them."""
    if offset + len(table) >= int(INVALID):
        raise ValueError("ids past the uint32 id space")
    if out is None:
        out = np.empty(len(sorted_queries), np.uint32)
    join_sorted(
        np.ascontiguousarray(table, np.uint64),
        np.ascontiguousarray(sorted_queries, np.uint64),
        offset,
        INVALID,
        out,
    )
    return out


def merge_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge sorted runs of distinct keys into one sorted table with summed counts.

    Pairwise, in a balanced tree of linear merges (compiled): every level is
    one sequential pass, log2(runs) levels.
    """
    runs = [
        (np.ascontiguousarray(k, np.uint64), np.ascontiguousarray(c, np.int64))
        for k, c in parts
        if len(k)
    ]
    if not runs:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    while len(runs) > 1:
        merged = []
        for i in range(0, len(runs) - 1, 2):
            (ka, ca), (kb, cb) = runs[i], runs[i + 1]
            ko = np.empty(len(ka) + len(kb), np.uint64)
            co = np.empty(len(ko), np.int64)
            m = merge_two(ka, ca, kb, cb, ko, co)
            merged.append((ko[:m], co[:m]))
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    keys, counts = runs[0]
    if keys is parts[0][0] or keys.base is parts[0][0]:  # a single input run: a private copy
        keys, counts = keys.copy(), counts.copy()
    return keys, counts


def merge_counts_bucketed(
    parts: list[tuple[np.ndarray, np.ndarray]],
    code: KeyCode,
    lo: int,
    hi: int,
    bucket: int = BUCKET,
    scratch: Scratch | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`merge_counts` of runs whose keys (made by ``code``) lie in [lo, hi), by
    one exact sort instead of pairwise merges: every (key, count) entry becomes
    one uint64 (the key's bits below a bucket's + a 32-bit count), scattered
    into cache-sized buckets of the range, each sorted by numpy, equal keys
    summed in one pass. Falls back to `merge_counts` when a key's remaining
    bits and a count do not fit one uint64 (wide codes). ``hi`` = 2**64 for
    the last range. Counts must be < 2**32 (a unit's are)."""
    runs = [(np.ascontiguousarray(k, np.uint64), c) for k, c in parts if len(k)]
    m = sum(len(k) for k, _ in runs)
    if m == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    span_bits = max(int(hi - lo - 1).bit_length(), 1)  # the range: 2**span_bits wide at most
    want = max(int(np.ceil(np.log2(max(m / bucket, 1)))), 1)  # buckets in the range
    top_bits = min(64 - span_bits + want, code.bits)  # bucket = key >> (64 - top_bits)
    rest_bits = code.bits - top_bits
    if rest_bits > 32:
        return merge_counts(parts)
    top_shift = 64 - top_bits
    base = lo >> top_shift
    nb = ((hi - 1) >> top_shift) - base + 1
    edges = (np.arange(1, nb, dtype=np.uint64) + np.uint64(base)) << np.uint64(top_shift)
    hist = np.zeros(nb, np.int64)
    for keys, _ in runs:  # sorted runs: bucket sizes from their boundaries
        hist += np.diff(np.searchsorted(keys, edges), prepend=0, append=len(keys))
    bounds = bucket_bounds(hist)
    packed = work_array(scratch, "merge_packed", m, np.uint64)
    cursor = bounds[:-1].copy()
    rest_mask = np.uint64((1 << rest_bits) - 1)
    for keys, counts in runs:
        scatter_counted(
            keys,
            np.ascontiguousarray(counts, np.uint32),
            np.uint64(code.up),
            np.uint64(top_shift),
            base,
            rest_mask,
            cursor,
            packed,
        )
    sort_buckets(packed, bounds[:-1], bounds[1:])
    out_keys = work_array(scratch, "merge_keys", m, np.uint64)
    out_counts = work_array(scratch, "merge_counts", m, np.int64)
    u = counted_runs(
        packed, bounds, base, np.uint64(rest_bits), np.uint64(code.up), out_keys, out_counts
    )
    return out_keys[:u], out_counts[:u]


def part_bounds(nparts: int) -> np.ndarray:
    """Boundaries of `nparts` equal ranges of the mixed-key space (uint64, len nparts+1;
    the end, 2**64, is implied)."""
    edges = [(i * (2**64)) // nparts for i in range(nparts)]
    return np.array(edges, dtype=np.uint64)


def part_range(nparts: int, p: int) -> tuple[int, int | None]:
    """Key range p of `part_bounds(nparts)`: [lo, hi) as ints, hi None for the last."""
    bounds = part_bounds(nparts)
    return int(bounds[p]), (int(bounds[p + 1]) if p + 1 < nparts else None)


def key_slice(keys: np.ndarray, lo: int, hi: int | None) -> tuple[int, int]:
    """Index bounds [a, b) of the keys of a sorted array in [lo, hi) (hi None: to the end)."""
    a = int(np.searchsorted(keys, np.uint64(lo)))
    b = len(keys) if hi is None else int(np.searchsorted(keys, np.uint64(hi)))
    return a, b


@compiled(cache=True, nogil=True)
def scatter_counted(
    keys: U64s,
    counts: U32s,
    up: np.uint64,
    top_shift: np.uint64,
    base: int,
    rest_mask: np.uint64,
    cursor: I64s,
    packed: U64s,
) -> None:
    """Place sorted (key, count) entries in their buckets (``key >> top_shift``,
    less ``base``) as one uint64: the key's bits below the bucket bits (keys
    sit above ``up`` zero bits), then the count (32 bits)."""
    for i in range(len(keys)):
        key = keys[i]
        b = np.int64(key >> top_shift) - base
        d = cursor[b]
        cursor[b] = d + 1
        packed[d] = (((key >> up) & rest_mask) << np.uint64(32)) | np.uint64(counts[i])


@compiled(cache=True, nogil=True)
def counted_runs(
    packed: U64s,
    bounds: I64s,
    base: int,
    rest_bits: np.uint64,
    up: np.uint64,
    out_keys: U64s,
    out_counts: I64s,
) -> int:
    """Sum the counts of equal keys in buckets of `scatter_counted` entries that
    numpy sorted in place; writes the distinct keys in order. Returns their number."""
    low = np.uint64(0xFFFFFFFF)
    u = 0
    for p in range(len(bounds) - 1):
        top = np.uint64(base + p) << rest_bits
        last = np.uint64(0)
        for d in range(bounds[p], bounds[p + 1]):
            v = packed[d]
            r = v >> np.uint64(32)
            if d == bounds[p] or r != last:
                out_keys[u] = (top | r) << up
                out_counts[u] = np.int64(v & low)
                u += 1
                last = r
            else:
                out_counts[u - 1] += np.int64(v & low)
    return u


@compiled(cache=True, nogil=True)
def join_sorted(table: U64s, queries: U64s, offset: int, missing: int, out: Array) -> None:
    """out[i] = offset + index of queries[i] in table, or ``missing`` (both sorted
    ascending; the table distinct, the queries may repeat).

    Branch-free merge: each step advances the queries (on a hit or when the
    query is smaller) or the table, so the loop carries no data-dependent
    branch to mispredict.
    """
    out[:] = missing
    i = j = 0
    nq, nt = len(queries), len(table)
    while i < nq and j < nt:
        a = queries[i]
        b = table[j]
        out[i] = offset + j if a == b else out[i]
        i += a <= b
        j += b < a


@compiled(cache=True, nogil=True)
def merge_two(ka: U64s, ca: I64s, kb: U64s, cb: I64s, ko: U64s, co: I64s) -> int:
    """Merge two sorted runs of distinct keys, summing the counts of shared keys.

    Branch-free inner loop (see `join_sorted`). Returns the merged length.
    """
    i = 0
    j = 0
    m = 0
    na = len(ka)
    nb = len(kb)
    while i < na and j < nb:
        a = ka[i]
        b = kb[j]
        ta = a <= b
        tb = b <= a
        ko[m] = a if ta else b
        co[m] = (ca[i] if ta else 0) + (cb[j] if tb else 0)
        i += ta
        j += tb
        m += 1
    while i < na:
        ko[m] = ka[i]
        co[m] = ca[i]
        i += 1
        m += 1
    while j < nb:
        ko[m] = kb[j]
        co[m] = cb[j]
        j += 1
        m += 1
    return m
