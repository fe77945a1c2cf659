"""Reading a unit's sorted buckets of candidates off as its table: the distinct keys in
order, their counts and (when asked) the positions grouped by key (`counting.unit_table`
scatters and sorts them)."""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import I32s, I64s, U32s, U64s, compiled

# where the run kernels write a unit's table: (distinct keys, counts, where each key's
# positions start in the order, the positions grouped by key); see `bucket_runs`
Runs = tuple[U64s, U32s, I32s, I32s]


def sorted_runs(
    packed: np.ndarray,
    bstart: np.ndarray,
    bend: np.ndarray,
    shift: np.uint64,
    pos_bits: int,
    up: int,
    limit: int,
    runs: Runs,
) -> int:
    """Sort each bucket of `scatter_exact` entries (numpy) and read its runs at once
    (`exact_runs`), while it is in the core's cache: the outputs of `bucket_runs`, here
    without gaps. Returns the number of distinct keys."""
    u = o = 0
    args = (np.uint64(shift), np.uint64(pos_bits), np.uint64(up), limit, runs)
    for b, (b0, b1) in enumerate(zip(bstart.tolist(), bend.tolist(), strict=True)):
        if b1 > b0:
            packed[b0:b1].sort()
            u, o = exact_runs(packed, bstart, bend, b, *args, u, o)
    runs[2][u] = o
    return u


def sorted_key_runs(
    packed: np.ndarray,
    bstart: np.ndarray,
    bend: np.ndarray,
    shift: np.uint64,
    up: int,
    uniq: np.ndarray,
    counts: np.ndarray,
) -> int:
    """`sorted_runs` for buckets of key words without positions (`narrow_runs`): the
    distinct keys and their counts. Returns how many."""
    u = 0
    for b, (b0, b1) in enumerate(zip(bstart.tolist(), bend.tolist(), strict=True)):
        if b1 > b0:
            packed[b0:b1].sort()
            u = narrow_runs(packed, b0, b1, np.uint64(b) << shift, np.uint64(up), uniq, counts, u)
    return u


@compiled(cache=True, nogil=True)
def exact_runs(
    packed: U64s,
    bstart: I64s,
    bend: I64s,
    p: int,
    shift: np.uint64,
    pos_bits: np.uint64,
    up: np.uint64,
    limit: int,
    runs: Runs,
    u: int,
    o: int,
) -> tuple[int, int]:
    """The distinct keys of sorted bucket p (``packed[bstart[p]:bend[p]]``, not empty), in order,
    written from key u and position o of the outputs (see `bucket_runs`); returns
    where the next bucket's go. ``up`` shifts a key to the top bits of its uint64.
    A run's count is kept in a register and stored when the run ends."""
    uniq, counts, starts, order = runs
    pmask = (np.uint64(1) << pos_bits) - np.uint64(1)
    lim = np.int64(limit)
    b0 = bstart[p]
    b1 = bend[p]
    top = np.uint64(p) << shift
    last = packed[b0] >> pos_bits
    uniq[u] = (top | last) << up
    starts[u] = o
    c = np.uint32(0)
    for d in range(b0, b1):
        v = packed[d]
        r = v >> pos_bits
        w = np.int64(v & pmask)
        if r != last:
            counts[u] = c
            u += 1
            uniq[u] = (top | r) << up
            starts[u] = o
            c = np.uint32(0)
            last = r
        order[o] = w
        o += 1
        c += np.uint32(w < lim)
    counts[u] = c
    u += 1
    return u, o


@compiled(cache=True, nogil=True)
def narrow_runs(
    packed: U32s, b0: int, b1: int, top: np.uint64, up: np.uint64, uniq: U64s, counts: U32s, u: int
) -> int:
    """The distinct keys and counts of a sorted bucket ``packed[b0:b1]`` (not empty) of
    `scatter_exact` key words (no position), its top bits ``top``, written from key u;
    returns the next u."""
    last = packed[b0]
    uniq[u] = (top | np.uint64(last)) << up
    c = np.uint32(0)
    for d in range(b0, b1):
        v = packed[d]
        if v != last:
            counts[u] = c
            u += 1
            uniq[u] = (top | np.uint64(v)) << up
            c = np.uint32(0)
            last = v
        c += np.uint32(1)
    counts[u] = c
    return u + 1


@compiled(cache=True, nogil=True)
def bucket_runs(
    packed: U64s,
    keys: U64s,
    where: I32s,
    bounds: I64s,
    lo_bits: int,
    limit: int,
    runs: Runs,
) -> int:
    """Distinct keys in order, from buckets whose packed entries numpy sorted in place.

    Buckets hold disjoint, increasing key ranges, so their runs, in bucket
    order, are the unit's sorted distinct keys: ``uniq``/``counts`` (only
    positions < ``limit`` count). ``order`` lists the candidates' positions
    grouped by key, in key order: key r's positions are
    ``order[starts[r]:starts[r+1]]``. Entries whose packed top bits tie are
    ordered by full key with an insertion sort (ties of distinct keys are
    rare: about n^2 / 2^(65-lo_bits)). Returns the number of distinct keys.
    """
    uniq, counts, starts, order = runs
    lo = np.uint64((1 << lo_bits) - 1)
    hi = ~lo
    u = 0
    for p in range(len(bounds) - 1):
        b0 = bounds[p]
        n = bounds[p + 1] - b0
        s = 0
        while s < n:
            top = packed[b0 + s] & hi
            e = s + 1
            while e < n and (packed[b0 + e] & hi) == top:
                e += 1
            if e - s > 1:
                for a in range(s + 1, e):
                    x = packed[b0 + a]
                    kx = keys[b0 + np.int64(x & lo)]
                    c = a - 1
                    while c >= s and keys[b0 + np.int64(packed[b0 + c] & lo)] > kx:
                        packed[b0 + c + 1] = packed[b0 + c]
                        c -= 1
                    packed[b0 + c + 1] = x
            last = np.uint64(0)
            for a in range(s, e):
                j = b0 + np.int64(packed[b0 + a] & lo)
                key = keys[j]
                if a == s or key != last:
                    uniq[u] = key
                    counts[u] = 0
                    starts[u] = b0 + a
                    u += 1
                    last = key
                w = where[j]
                order[b0 + a] = w
                if w < limit:
                    counts[u - 1] += np.uint32(1)
            s = e
    starts[u] = bounds[len(bounds) - 1]
    return u
