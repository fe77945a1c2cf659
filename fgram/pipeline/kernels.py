"""Counting kernels over token arrays: numpy, with the hot loops in `compiled` (numba).

Conventions
-----------
- A *token stream* is a ``uint32`` array; ``SENTINEL`` (2**32-1) marks a
  document boundary. Token ids are at most 2**31-1, so it never collides.
- An n-gram of length k is identified by an exact 64-bit key, chained:
  ``key = (id of its (k-1)-prefix) << 32 | last token``. For k = 2 the
  "id" of the 1-gram prefix is the token itself. Ids of (k-1)-grams are
  dense ranks in the frequent set of the previous pass (< 2**32-1).
- Keys are stored *mixed* by a bijection of uint64 (``mix``/``unmix``), so
  they are spread uniformly: sorted mixed keys can be range-partitioned by
  their top bits into balanced ranges. No collisions: mix is invertible.
- ``INVALID`` (2**32-1) in an id array means "no id here".
"""
from __future__ import annotations

import numpy as np

from . import compiled as cc

SENTINEL = np.uint32(0xFFFFFFFF)
INVALID = np.uint32(0xFFFFFFFF)
MAX_TOKEN = 2**31 - 1

_U32 = np.uint64(32)
_LO32 = np.uint64(0xFFFFFFFF)
_C = 0x9E3779B97F4A7C15
_C_INV = pow(_C, -1, 2**64)
_M = np.uint64(_C)
_M_INV = np.uint64(_C_INV)


def mix(x: np.ndarray) -> np.ndarray:
    """A bijection on uint64 that spreads structured keys uniformly. Returns a new array."""
    return _mix_inplace(np.array(x, dtype=np.uint64))


def unmix(y: np.ndarray) -> np.ndarray:
    """Inverse of `mix`."""
    y = np.asarray(y, dtype=np.uint64)
    x = y ^ (y >> np.uint64(29))
    x ^= x >> np.uint64(58)
    x *= _M_INV
    x ^= (x >> np.uint64(31)) ^ (x >> np.uint64(62))
    return x


def split_key(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unmixed key -> (prefix id or first token, last token)."""
    raw = np.asarray(raw, dtype=np.uint64)
    return (raw >> _U32).astype(np.int64), (raw & _LO32).astype(np.int64)


def ngram_keys(prev: np.ndarray, tokens: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Mixed keys of the candidate k-grams of one token stream.

    ``prev[i]`` is the id of the (k-1)-gram starting at i (for k = 2: the
    token itself), or INVALID/SENTINEL where there is none. A k-gram at i is
    a candidate iff both its (k-1)-prefix (at i) and (k-1)-suffix (at i+1)
    have ids; then it lies inside one document.

    Returns ``(positions, keys)`` in position order: int64 start positions and
    uint64 mixed keys. (The numpy reference of what `unit_table`'s compiled
    kernels compute; the tests and the kernel benchmark use it.)
    """
    n_pos = len(tokens) - k + 1
    if n_pos <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    a = prev[:n_pos]
    ok = a != INVALID
    ok &= prev[1:n_pos + 1] != INVALID
    pos = np.flatnonzero(ok)
    if len(pos) * 4 < n_pos:          # sparse: gather only the candidates
        keys = a[pos].astype(np.uint64)
        keys <<= _U32
        keys |= tokens[pos + (k - 1)]
    else:                             # dense: build every key, then compact once
        keys = a.astype(np.uint64)
        keys <<= _U32
        keys |= tokens[k - 1:k - 1 + n_pos]
        keys = keys[ok]
    return pos, _mix_inplace(keys)


def _mix_inplace(x: np.ndarray) -> np.ndarray:
    x ^= x >> np.uint64(31)
    x *= _M
    x ^= x >> np.uint64(29)
    return x


def lookup_sorted(table: np.ndarray, sorted_queries: np.ndarray) -> np.ndarray:
    """Index of each (sorted) query in a sorted table, -1 where absent.

    Both sorted: one linear merge-join pass (compiled), no binary searches.
    """
    out = np.empty(len(sorted_queries), np.int64)
    cc.join_sorted(np.ascontiguousarray(table, np.uint64),
                   np.ascontiguousarray(sorted_queries, np.uint64), out)
    return out


BUCKET = 1 << 16    # target candidates per bucket: its arrays stay in the core's cache


def unit_table(prev: np.ndarray, tokens: np.ndarray, k: int, limit: int, want_order: bool,
               bucket: int = BUCKET, min_lo_bits: int = 1):
    """Count the candidate k-grams of one unit of work.

    ``prev``/``tokens`` as for `ngram_keys`. Only k-grams starting before
    ``limit`` belong to this unit (the rest are the overlap that a flat-file
    range reads past its end, needed only for their ids). Compiled kernels
    (`compiled`): the candidates are radix-partitioned by the top bits of
    their (uniformly mixed) keys into cache-sized buckets, each bucket sorted
    by numpy, and the runs read off in bucket order, which is key order.

    Returns ``(keys, counts, order, counted)``: the unit's distinct keys
    (sorted; the overlap included with count 0) and their counts; if asked,
    ``order = (positions, starts)``: the candidates' positions (int32) grouped
    by key in key order, key r's being ``positions[starts[r]:starts[r+1]]``
    (`ids_at` turns it and per-key values into a per-position array).

    ``bucket`` (candidates per bucket) and ``min_lo_bits`` (packed index bits:
    more bits, more keys whose remaining top bits tie) exist for the tests.
    """
    n_pos = max(len(tokens) - k + 1, 0)
    if n_pos >= 2**31:
        raise ValueError("a unit holds at most 2**31-1 positions")
    prev = np.ascontiguousarray(prev, dtype=np.uint32)
    tokens = np.ascontiguousarray(tokens, dtype=np.uint32)
    bits = max(1, int(np.ceil(np.log2(max(n_pos, 1) / bucket))))   # buckets: the top bits
    shift = np.uint64(64 - bits)
    hist = np.zeros(1 << bits, np.int64)
    cc.candidate_histogram(prev, tokens, k, n_pos, shift, hist)
    bounds = np.zeros(len(hist) + 1, np.int64)
    np.cumsum(hist, out=bounds[1:])
    n = int(bounds[-1])
    lo_bits = max(min_lo_bits, int(hist.max(initial=1) - 1).bit_length())
    keys = np.empty(n, np.uint64)
    where = np.empty(n, np.int32)
    packed = np.empty(n, np.uint64)
    cc.scatter_buckets(prev, tokens, k, n_pos, shift, bounds, lo_bits, keys, where, packed)
    for b in np.flatnonzero(hist > 1):
        packed[bounds[b]:bounds[b + 1]].sort()
    uniq = np.empty(n, np.uint64)
    counts = np.empty(n, np.int64)
    starts = np.empty(n + 1, np.int64)
    order = np.empty(n, np.int32)
    u = cc.bucket_runs(packed, keys, where, bounds, lo_bits, limit, uniq, counts, starts, order)
    counted = int(np.count_nonzero(where < limit))
    del packed, keys, where
    result = (order, starts[:u + 1].copy()) if want_order else None
    return uniq[:u].copy(), counts[:u].copy(), result, counted


def ids_at(values: np.ndarray, order: tuple[np.ndarray, np.ndarray], n: int) -> np.ndarray:
    """Per-position uint32 array of length n: ``values[r]`` at key r's positions, INVALID elsewhere."""
    positions, starts = order
    out = np.full(n, INVALID, dtype=np.uint32)
    cc.spread(np.ascontiguousarray(values, np.uint32), starts, positions, out)
    return out


def merge_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge sorted runs of distinct keys into one sorted table with summed counts.

    Pairwise, in a balanced tree of linear merges (compiled): every level is
    one sequential pass, log2(runs) levels.
    """
    runs = [(np.ascontiguousarray(k, np.uint64), np.ascontiguousarray(c, np.int64))
            for k, c in parts if len(k)]
    if not runs:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    while len(runs) > 1:
        merged = []
        for i in range(0, len(runs) - 1, 2):
            (ka, ca), (kb, cb) = runs[i], runs[i + 1]
            ko = np.empty(len(ka) + len(kb), np.uint64)
            co = np.empty(len(ko), np.int64)
            m = cc.merge_two(ka, ca, kb, cb, ko, co)
            merged.append((ko[:m], co[:m]))
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    keys, counts = runs[0]
    if keys is parts[0][0] or keys.base is parts[0][0]:    # a single input run: a private copy
        keys, counts = keys.copy(), counts.copy()
    return keys, counts


def histogram(counts: np.ndarray, floor: int) -> dict[int, int]:
    """{count value: number of keys} for counts >= floor (a small summary)."""
    c = counts[counts >= floor]
    vals, num = np.unique(c, return_counts=True)
    return {int(v): int(n) for v, n in zip(vals, num)}


def kth_largest(hist: dict[int, int], k: int) -> int | None:
    """The k-th largest value of a histogram, or None if it holds fewer than k."""
    seen = 0
    for value in sorted(hist, reverse=True):
        seen += hist[value]
        if seen >= k:
            return value
    return None


def merge_hists(*hists: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for v, n in h.items():
            out[v] = out.get(v, 0) + n
    return out


def part_bounds(nparts: int) -> np.ndarray:
    """Boundaries of `nparts` equal ranges of the mixed-key space (uint64, len nparts+1, last = 2**64 handled)."""
    edges = [(i * (2**64)) // nparts for i in range(nparts)]
    return np.array(edges, dtype=np.uint64)


def warm_up() -> None:
    """Run every compiled counting kernel once on tiny data.

    The first call of a kernel compiles it (~2 s for all of them) and caches
    the machine code on disk; calling this in the driver before tasks start
    means the worker processes of this machine load it instead of each
    compiling it at once.
    """
    from .inputs import stream_from_lists
    for dtype in (np.uint16, np.uint32):     # the common flat-file dtypes
        cc.separate(np.array([1, 0, 2], dtype), 0, 3, True, np.empty(3, np.uint32))
    tokens = stream_from_lists(np.array([4, 3]), np.array([1, 2, 1, 2, 3, 2, 1])).tokens
    uniq, _, order, _ = unit_table(tokens, tokens, 2, len(tokens) - 1, True)
    ids = ids_at(np.arange(len(uniq)), order, len(tokens))
    uniq3, counts3, _, _ = unit_table(ids, tokens, 3, len(tokens), False)
    lookup_sorted(uniq3, uniq3)
    merge_counts([(uniq3, counts3), (uniq3[:1], counts3[:1])])
