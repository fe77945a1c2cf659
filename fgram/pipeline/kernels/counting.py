"""Counting one unit of work: its candidate k-grams' distinct keys and counts, by a
radix partition into cache-sized buckets (compiled) and numpy sorts of each bucket."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fgram.pipeline.kernels.jit import Array, I32s, I64s, U32s, U64s, compiled
from fgram.pipeline.kernels.keys import INVALID, WIDE, KeyCode, code_key1
from fgram.pipeline.kernels.runs import bucket_runs, sorted_key_runs, sorted_runs
from fgram.pipeline.kernels.scratch import Scratch, work_array

# what the scatter kernels read of a unit: (prev ids, tokens, k, positions, key code, shift)
# (see `unit_table`); the bucket of a candidate's key is its top bits, ``key >> shift``
Candidates = tuple[U32s, U32s, int, int, tuple[np.uint64, ...], np.uint64]


def bucket_bounds(hist: np.ndarray) -> np.ndarray:
    """Where each bucket starts (and, last, where they all end), from their sizes."""
    bounds = np.zeros(len(hist) + 1, np.int64)
    np.cumsum(hist, out=bounds[1:])
    return bounds


def sort_buckets(packed: np.ndarray, bstart: np.ndarray, bend: np.ndarray) -> None:
    """Sort each bucket ``packed[bstart[b]:bend[b]]`` in place: numpy's sort, one
    cache-sized slice at a time."""
    for b in np.flatnonzero(bend - bstart > 1):
        packed[bstart[b] : bend[b]].sort()


BUCKET = 1 << 16  # target candidates per bucket: its arrays stay in the core's cache


MAX_BUCKET_BITS = 12  # more buckets than 2**12: numpy's per-bucket sort calls cost too much


# Bucket sizes estimated from every SAMPLE-th position (a unit of SAMPLE_FROM positions
# or more), each bucket given room for its estimate + 6 standard deviations: the
# exact count was a pass over every position before the scatter's own.
# A bucket that fills up anyway (e.g. a corpus periodic in SAMPLE) is counted exactly.
SAMPLE = 32


SAMPLE_FROM = 1 << 20


def unit_table(
    prev: np.ndarray,
    tokens: np.ndarray,
    k: int,
    limit: int,
    want_order: bool,
    code: KeyCode = WIDE,
    bucket: int = BUCKET,
    min_lo_bits: int = 1,
    exact: bool = True,
    scratch: Scratch | None = None,
    sample: int = SAMPLE,
    sample_from: int = SAMPLE_FROM,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None, int]:
    """Count the candidate k-grams of one unit of work.

    ``prev``/``tokens`` as for `ngram_keys`, keys made by ``code``. Only
    k-grams starting before ``limit`` belong to this unit (the rest are the
    overlap that a flat-file range reads past its end, needed only for their
    ids). Compiled kernels: the candidates are radix-partitioned
    by the top bits of their (uniformly mixed) keys into cache-sized buckets,
    each bucket sorted by numpy, and the runs read off in bucket order, which
    is key order. When a key's bits below the bucket bits and a position fit
    one uint64 together (``exact``: e.g. every pass of a 16-bit vocabulary),
    the sort orders the candidates completely and the runs are one
    sequential pass; otherwise a bucket sorts (top key bits, index) pairs and
    the runs check the full keys.

    Returns ``(keys, counts, order, counted)``: the unit's distinct keys
    (sorted; the overlap's included with count 0, the next pass needs their ids: not
    when no order is asked for and a key's bits below the bucket bits fit 32, where
    only the own candidates are scattered, one uint32 word each, `_counts_only`) and
    their counts; if asked,
    ``order = (positions, starts)``: the candidates' positions (both int32) grouped
    by key in key order, key r's being ``positions[starts[r]:starts[r+1]]``
    (`ids_at` turns it and per-key values into a per-position array).

    With a ``scratch``, the work arrays and the returned ones are its
    buffers (valid until the next call with it); counts are uint32.
    ``bucket`` (candidates per bucket), ``min_lo_bits`` (packed index bits:
    more bits, more keys whose remaining top bits tie), ``exact=False``
    (force the indirect path), ``sample`` (0: no estimated bucket sizes) and
    ``sample_from`` exist for the tests.
    """
    n_pos = max(len(tokens) - k + 1, 0)
    if n_pos >= 2**31:
        raise ValueError("a unit holds at most 2**31-1 positions")
    prev = np.ascontiguousarray(prev, dtype=np.uint32)
    tokens = np.ascontiguousarray(tokens, dtype=np.uint32)
    args = code.args()
    bits = max(1, int(np.ceil(np.log2(max(n_pos, 1) / bucket))))  # buckets: the top bits
    pos_bits = max(int(n_pos - 1).bit_length(), 1)
    exact = exact and code.bits + pos_bits - 64 <= max(bits, MAX_BUCKET_BITS)
    if exact:
        bits = max(bits, code.bits + pos_bits - 64)
    bits = min(bits, code.bits)
    shift = np.uint64(code.bits - bits)
    cands = (prev, tokens, k, n_pos, args, shift)
    sampled = exact and sample and n_pos >= sample_from
    if exact and not want_order:
        n_own = min(n_pos, limit)
        sampled_own = sample if sample and n_own >= sample_from else 0
        counted_only = _counts_only(prev, tokens, k, n_own, code, bucket, scratch, sampled_own)
        if counted_only is not None:
            return counted_only
    packed, bstart, bend, indirect = _partition(
        cands, code, bits, pos_bits, exact, min_lo_bits, scratch, sample if sampled else 0
    )
    n = int((bend - bstart).sum())
    # untouched tails of these are never resident: no copies of the used heads
    uniq = work_array(scratch, "uniq", n, np.uint64)
    counts = work_array(scratch, "counts", n, np.uint32)
    starts = work_array(scratch, "starts", n + 1, np.int32)  # n < 2**31
    order = work_array(scratch, "order", n, np.int32)
    if indirect is None:
        u = sorted_runs(
            packed, bstart, bend, shift, pos_bits, code.up, limit, (uniq, counts, starts, order)
        )
        counted = int(counts[:u].sum())
    else:
        sort_buckets(packed, bstart, bend)
        keys, where, bounds, lo_bits = indirect
        u = bucket_runs(packed, keys, where, bounds, lo_bits, limit, (uniq, counts, starts, order))
        counted = int(np.count_nonzero(where < limit))
    result = (order, starts[: u + 1]) if want_order else None
    return uniq[:u], counts[:u], result, counted


def _counts_only(
    prev: np.ndarray,
    tokens: np.ndarray,
    k: int,
    n_own: int,
    code: KeyCode,
    bucket: int,
    scratch: Scratch | None,
    sample: int,
) -> tuple[np.ndarray, np.ndarray, None, int] | None:
    """`unit_table` when no order is asked for (the last pass) and a key's bits below
    the bucket bits fit 32: only the unit's own positions, one uint32 word per
    candidate (no position: nothing needs it), so the scatter writes and the sorts
    order half the bytes of the exact path's words. None when the keys are wider."""
    bits = min(max(1, int(np.ceil(np.log2(max(n_own, 1) / bucket)))), code.bits)
    if code.bits - bits > 32:
        return None
    shift = np.uint64(code.bits - bits)
    cands = (prev, tokens, k, n_own, code.args(), shift)
    keys_only = np.uint64(0)  # no position bits
    packed, bstart, bend = _scattered(
        cands,
        bits,
        scratch,
        sample,
        lambda c, bounds, words, ends: scatter_exact(c, keys_only, bounds, words, ends),
        np.uint32,
    )
    n = int((bend - bstart).sum())
    uniq = work_array(scratch, "uniq", n, np.uint64)
    counts = work_array(scratch, "counts", n, np.uint32)
    u = sorted_key_runs(packed, bstart, bend, shift, code.up, uniq, counts)
    return uniq[:u], counts[:u], None, int(counts[:u].sum())


def _scattered(
    cands: tuple[Any, ...],
    bits: int,
    scratch: Scratch | None,
    sample: int,
    scatter: Callable[[tuple[Any, ...], np.ndarray, np.ndarray, np.ndarray], bool],
    dtype: type[np.unsignedinteger],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidates' words (``scatter(cands, bounds, packed, ends)``, of ``dtype``) in
    2**bits buckets by their keys' top bits: ``(packed, bucket starts, bucket ends)``.
    Bucket sizes estimated from every ``sample``-th position (0: counted), recounted when
    a bucket overflows its estimate."""
    ends = np.empty(1 << bits, np.int64)
    if sample:
        est = np.zeros(1 << bits, np.int64)
        candidate_histogram(cands, sample, est)
        room = est * sample + (6 * sample * np.sqrt(est + 1)).astype(np.int64) + 4 * sample
        bounds = bucket_bounds(room)
        packed = work_array(scratch, "packed", int(bounds[-1]), dtype)
        if scatter(cands, bounds, packed, ends):
            return packed, bounds[:-1], ends
    hist = np.zeros(1 << bits, np.int64)
    candidate_histogram(cands, 1, hist)
    bounds = bucket_bounds(hist)
    packed = work_array(scratch, "packed", int(bounds[-1]), dtype)
    scatter(cands, bounds, packed, ends)  # exact sizes: no bucket overflows
    return packed, bounds[:-1], bounds[1:]


Indirect = tuple[np.ndarray, np.ndarray, np.ndarray, int]  # keys, positions, bounds, low bits


def _partition(
    cands: tuple[Any, ...],
    code: KeyCode,
    bits: int,
    pos_bits: int,
    exact: bool,
    min_lo_bits: int,
    scratch: Scratch | None,
    sample: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Indirect | None]:
    """The candidates scattered into 2**bits buckets by their keys' top bits:
    ``(packed, bucket starts, bucket ends, indirect)``. Exact (key bits and position in
    one word): bucket sizes estimated from every ``sample``-th position (0: counted),
    recounted when a bucket overflows its estimate; indirect: (top key bits, index)
    words with the keys and positions beside them (``indirect``)."""
    if exact:
        pbits = np.uint64(pos_bits)
        words = _scattered(
            cands,
            bits,
            scratch,
            sample,
            lambda c, bounds, packed, ends: scatter_exact(c, pbits, bounds, packed, ends),
            np.uint64,
        )
        return (*words, None)
    hist = np.zeros(1 << bits, np.int64)
    candidate_histogram(cands, 1, hist)
    bounds = bucket_bounds(hist)
    packed = work_array(scratch, "packed", int(bounds[-1]), np.uint64)
    lo_bits = max(min_lo_bits, int(hist.max(initial=1) - 1).bit_length())
    keys = work_array(scratch, "keys", len(packed), np.uint64)
    where = work_array(scratch, "where", len(packed), np.int32)
    scatter_buckets(cands, np.uint64(code.up), bounds, lo_bits, keys, where, packed)
    return packed, bounds[:-1], bounds[1:], (keys, where, bounds, lo_bits)


SPREAD_BITS = 18  # `ids_at` writes ids 2**18 positions (1 MB of them) at a time: in cache


def ids_at(
    values: np.ndarray, order: tuple[np.ndarray, np.ndarray], n: int, scratch: Scratch | None = None
) -> np.ndarray:
    """Per-position uint32 array of length n: ``values[r]`` at key r's positions, INVALID
    elsewhere."""
    positions, starts = order
    out = work_array(scratch, "ids", n, np.uint32)
    out.fill(INVALID)
    words = work_array(scratch, "packed", n, np.uint64)  # unit_table's, free until it runs
    spread(np.ascontiguousarray(values, np.uint32), starts, positions, SPREAD_BITS, words, out)
    return out


@compiled(cache=True, inline="always")
def is_candidate(prev: U32s, i: int) -> bool:
    """Whether the k-gram at i is a candidate: its (k-1)-prefix (at i) and its
    (k-1)-suffix (at i+1) have ids."""
    ok: bool = prev[i] != INVALID and prev[i + 1] != INVALID
    return ok


@compiled(cache=True, nogil=True)
def candidate_histogram(cands: Candidates, step: int, hist: I64s) -> None:
    """Count the candidate k-grams per bucket (a bucket = the top bits of the mixed key),
    at every ``step``-th position (1: all of them; more: an estimate).

    A position i is a candidate iff ``prev[i]`` and ``prev[i+1]`` are ids (not
    INVALID); its key is ``code_key1(prev[i], tokens[i+k-1])``, its bucket
    that key ``>> shift``.
    """
    prev, tokens, k, n_pos, code, shift = cands
    for i in range(0, n_pos, step):
        if is_candidate(prev, i):
            hist[np.int64(code_key1(prev[i], tokens[i + k - 1], code) >> shift)] += 1


@compiled(cache=True, nogil=True)
def scatter_exact(
    cands: Candidates, pos_bits: np.uint64, bounds: I64s, packed: Array, ends: I64s
) -> bool:
    """Place every candidate in its bucket as one exact uint64: the key's bits
    below the bucket bits, then its position (``pos_bits`` bits). Sorting a
    bucket then orders it by key, and by position within a key.

    ``pos_bits`` 0: the key bits alone (`_counts_only`'s uint32 words, which they fit).
    Bucket b holds at most ``bounds[b+1] - bounds[b]`` entries (exact sizes, or
    room for an estimate); ``ends[b]`` is where its entries end. Returns False,
    with the buckets unusable, as soon as one is full (never with exact sizes)."""
    prev, tokens, k, n_pos, code, shift = cands
    cursor = ends
    cursor[:] = bounds[:-1]
    rest = (np.uint64(1) << shift) - np.uint64(1)
    pmask = (np.uint64(1) << pos_bits) - np.uint64(1)
    for i in range(n_pos):
        if is_candidate(prev, i):
            x = code_key1(prev[i], tokens[i + k - 1], code)
            b = np.int64(x >> shift)
            d = cursor[b]
            if d == bounds[b + 1]:
                return False
            cursor[b] = d + 1
            packed[d] = ((x & rest) << pos_bits) | (np.uint64(i) & pmask)
    return True


@compiled(cache=True, nogil=True)
def scatter_buckets(
    cands: Candidates,
    up: np.uint64,
    bounds: I64s,
    lo_bits: int,
    keys: U64s,
    where: I32s,
    packed: U64s,
) -> None:
    """When a key and a position do not fit one uint64 together: place every
    candidate in its bucket (``keys`` shifted up by ``up``, ``where`` = its
    position), then pack each: ``packed`` = (key's bits above ``lo_bits``) |
    (its index in the bucket)."""
    prev, tokens, k, n_pos, code, shift = cands
    cursor = bounds[:-1].copy()
    for i in range(n_pos):
        if is_candidate(prev, i):
            x = code_key1(prev[i], tokens[i + k - 1], code)
            b = np.int64(x >> shift)
            d = cursor[b]
            cursor[b] = d + 1
            keys[d] = x << up
            where[d] = i
    lo = np.uint64((1 << lo_bits) - 1)
    for b in range(len(bounds) - 1):  # sequential: cheap next to the scatter above
        for d in range(bounds[b], bounds[b + 1]):
            packed[d] = (keys[d] & ~lo) | np.uint64(d - bounds[b])


@compiled(cache=True, nogil=True)
def spread(values: U32s, starts: I32s, order: I32s, bits: int, words: U64s, out: U32s) -> None:
    """out[order[e]] = values[r] for every e in starts[r]:starts[r+1], except where
    values[r] is INVALID (what ``out`` holds already). In two passes, each of them
    writing to few places at a time: (position, value) words grouped by range of 2**bits
    positions (``words``: room for one per position), then each range's ids set while
    its slice of ``out`` is in cache, not one random write per position into all of it."""
    cursor = np.arange(0, len(out) + (1 << bits), 1 << bits)
    for r in range(len(values)):
        v = values[r]
        if v == INVALID:
            continue
        for e in range(starts[r], starts[r + 1]):
            p = order[e]
            b = p >> bits
            d = cursor[b]
            cursor[b] = d + 1
            words[d] = (np.uint64(p) << np.uint64(32)) | np.uint64(v)
    for b in range(len(cursor) - 1):
        for d in range(b << bits, cursor[b]):
            w = words[d]
            out[np.int64(w >> np.uint64(32))] = np.uint32(w & np.uint64(0xFFFFFFFF))
