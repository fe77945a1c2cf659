"""Scanning token streams for given n-grams (a refresh's newly frequent ones in old
shards): a set of window hashes with a cache-sized bitmap in front, rolled over the
stream or tested only at windows that hold a rare anchor token."""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import Array, U32s, U64s, compiled
from fgram.pipeline.kernels.keys import EMPTY, INVALID, MULT, mix1
from fgram.pipeline.kernels.partials import EMPTY_COUNTS, EMPTY_KEYS, IdTable, chain_ids

SET_BITS = 1 << 21  # at least a 256 KiB bitmap (a core's L2 cache) ...
SET_BITS_PER_ROW = 64  # ... and sparse enough that few windows probe the table
ANCHOR_STRIDE = 61  # a unit's token frequencies are estimated from every 61st token
ANCHOR_SHARE = 1 / 32  # anchored starts only while they are at most this share of windows


def window_set(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of token windows (rows) as an open-addressing set and a bitmap
    filter in front of it, for `scan_unit`."""
    rows = np.ascontiguousarray(rows, np.uint32)
    hashes = np.empty(len(rows), np.uint64)
    hash_rows(rows, hashes)
    tab = np.full(1 << max(int(2 * len(rows)).bit_length(), 4), EMPTY, np.uint64)
    fill_set(tab, hashes)
    bits = np.zeros(
        max(SET_BITS, 1 << int(SET_BITS_PER_ROW * len(rows)).bit_length()) // 64, np.uint64
    )
    fill_bits(bits, hashes)
    return tab, bits


def anchored_starts(tokens: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    """Window starts in one unit that include every place where a row (a window of
    tokens) occurs, found through one anchor per row: its rarest token in this unit
    (estimated from a sample), at its offset in the row. None when the anchors
    occur too often for that to beat scanning every window (`scan_unit`)."""
    n, w = len(tokens), rows.shape[1]
    if not len(rows) or n < w or w > 8:
        return None
    tokens = np.ascontiguousarray(tokens, np.uint32)
    rows = np.asarray(rows, np.uint32)
    top = int(rows.max())
    if top >= 2**22:  # per-token tables of over 32 MB: scan every window instead
        return None
    sample = tokens[::ANCHOR_STRIDE]
    freq = np.bincount(sample[sample <= top], minlength=top + 1)
    at = np.argmin(freq[rows], axis=1)
    anchor = rows[np.arange(len(rows)), at]
    offsets = np.zeros(top + 1, np.uint8)
    np.bitwise_or.at(offsets, anchor, (1 << at).astype(np.uint8))
    distinct = np.flatnonzero(offsets)
    per = np.unpackbits(offsets[distinct, None], axis=1).sum(axis=1)  # offsets per anchor
    expected = int((freq[distinct] * per).sum()) * ANCHOR_STRIDE
    limit = int(n * ANCHOR_SHARE)
    if expected > limit:
        return None
    out = np.empty(max(min(4 * expected + 1024, limit), 1), np.int64)
    m = find_anchored(tokens, w, offsets, out)
    return None if m < 0 else out[:m]


def scan_unit(
    tokens: np.ndarray,
    limit: int,
    k: int,
    new_set: tuple[np.ndarray, np.ndarray],
    tables: list[IdTable],
    old_size: int,
    starts: np.ndarray | None = None,
    sep: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Counts, in one unit of a kept shard, of the candidate k-grams it was never
    counted for: those whose (k-1)-prefix or (k-1)-suffix got its id in this refresh
    (id >= ``old_size``, its window in ``new_set``), the other one having an id too.

    One compiled pass marks the windows that hash into the set (only those at
    ``starts`` when given: a superset of where the set's windows occur); only
    the few marked positions are then checked exactly by chained id lookups
    (``tables`` = T_2..T_{k-1}). Returns sorted (keys, counts).

    ``sep``: ``tokens`` are a flat file's raw values (a memory map: with ``starts``,
    only the pages of their windows are read), ``sep`` their separator (None: a
    stream's tokens, INVALID at boundaries)."""
    w = k - 1
    n_pos = len(tokens) - k + 1
    if n_pos <= 0 or len(tables) < w - 1:
        return EMPTY_KEYS, EMPTY_COUNTS
    if sep is None:
        tokens = np.ascontiguousarray(tokens, np.uint32)
    tab, bits = new_set
    boundary = -1 if sep is None else sep  # -1: no raw value (INVALID is one anyway)
    if starts is None:
        marked = np.zeros(len(tokens) - w + 1, bool)
        windows_in_set(tokens, w, tab, bits, marked, boundary)
        hits = np.flatnonzero(marked)
    else:
        marked = np.zeros(len(starts), bool)
        windows_at_in_set(tokens, w, starts, tab, bits, marked, boundary)
        hits = starts[marked].astype(np.int64)
    # a k-gram at p has its prefix window at p or its suffix window at p + 1
    pos = np.union1d(hits, hits - 1)
    pos = pos[(pos >= 0) & (pos < min(n_pos, limit))]
    if not len(pos):
        return EMPTY_KEYS, EMPTY_COUNTS
    span = pos[:, None] + np.arange(k)
    raw = np.asarray(tokens[span])
    grams = raw.astype(np.uint32)
    if sep is not None:
        grams[raw == sep] = INVALID
    a = chain_ids(grams[:, :w], tables)
    b = chain_ids(grams[:, 1:], tables)
    ok = (a != INVALID) & (b != INVALID) & ((a >= old_size) | (b >= old_size))
    keys = tables[-1].code.encode(a[ok], grams[ok, w])
    keys, counts = np.unique(keys, return_counts=True)
    return keys, counts.astype(np.int64)


@compiled(cache=True)
def hash_rows(rows: U32s, out: U64s) -> None:
    """out[r] = the window hash of rows[r] (a 2-d uint32 array of token windows):
    mix(sum of (token + 1) * M**(w-1-j)) >> 1, the hash `windows_in_set` rolls."""
    for r in range(rows.shape[0]):
        h = np.uint64(0)
        for j in range(rows.shape[1]):
            h = h * MULT + np.uint64(rows[r, j]) + np.uint64(1)
        out[r] = mix1(h) >> np.uint64(1)


@compiled(cache=True, inline="always")
def _bit_of(h: np.uint64, bmask: np.uint64) -> np.uint64:
    """A window hash's bit in the bitmap of `fill_bits` / `windows_in_set` (one place,
    so that filling and testing can never disagree)."""
    bit: np.uint64 = (h >> np.uint64(20)) & bmask
    return bit


@compiled(cache=True)
def fill_set(tab: U64s, hashes: U64s) -> None:
    """Insert hashes into an empty open-addressing set (len a power of two, > len(hashes))."""
    mask = np.uint64(len(tab) - 1)
    for i in range(len(hashes)):
        s = hashes[i] & mask
        while tab[s] != EMPTY and tab[s] != hashes[i]:
            s = (s + np.uint64(1)) & mask
        tab[s] = hashes[i]


@compiled(cache=True, nogil=True)
def windows_in_set(tokens: Array, w: int, tab: U64s, bits: U64s, out: Array, sep: int = -1) -> None:
    """out[i] = whether the window tokens[i:i+w] (boundary-free) hashes into the set:
    a superset of the windows equal to one of the set's rows (callers verify).

    The window hash is rolled (one multiply per token); ``bits``, a cache-sized
    bitmap of the set's hashes (a power of two of uint64 words), is tested
    first, so that most windows never probe the table. ``sep``: a raw value that
    is a boundary too (`windows_at_in_set`)."""
    mask = np.uint64(len(tab) - 1)
    bmask = np.uint64(len(bits) * 64 - 1)
    top = np.uint64(1)
    for _ in range(w - 1):
        top *= MULT
    h = np.uint64(0)
    run = 0
    out[:] = False
    for i in range(len(tokens)):
        t = np.uint64(tokens[i])
        if t == INVALID or np.int64(t) == sep:
            run = 0
            h = np.uint64(0)
            continue
        if run >= w:
            h -= top * (np.uint64(tokens[i - w]) + np.uint64(1))
        h = h * MULT + t + np.uint64(1)
        run += 1
        if run >= w and _in_set(mix1(h) >> np.uint64(1), tab, mask, bits, bmask):
            out[i - w + 1] = True


@compiled(cache=True, inline="always")
def _in_set(x: np.uint64, tab: U64s, mask: np.uint64, bits: U64s, bmask: np.uint64) -> bool:
    """Whether window hash x is in the set (`fill_set` / `fill_bits`): its bit first."""
    b = _bit_of(x, bmask)
    if not (bits[b >> np.uint64(6)] >> (b & np.uint64(63))) & np.uint64(1):
        return False
    s = x & mask
    while tab[s] != EMPTY:
        if tab[s] == x:
            return True
        s = (s + np.uint64(1)) & mask
    return False


@compiled(cache=True, nogil=True)
def windows_at_in_set(
    tokens: Array, w: int, starts: Array, tab: U64s, bits: U64s, out: Array, sep: int = -1
) -> None:
    """`windows_in_set` for the windows at ``starts`` only: out[j] = whether window
    starts[j] (boundary-free, within tokens) hashes into the set. ``tokens``: a
    stream's (INVALID at boundaries), or a flat file's raw values, whose separator
    value ``sep`` is a boundary too."""
    mask = np.uint64(len(tab) - 1)
    bmask = np.uint64(len(bits) * 64 - 1)
    top = np.uint64(1)
    for _ in range(w - 1):
        top *= MULT
    h = np.uint64(0)
    last = np.int64(-2)  # the previous start, when its window was whole
    for j in range(len(starts)):
        p = np.int64(starts[j])
        out[j] = False
        if p + w > len(tokens):
            continue
        whole = True
        if p == last + 1:  # the next window of a whole one: roll its hash on a token
            t = np.uint64(tokens[p + w - 1])
            if t == INVALID or np.int64(t) == sep:
                whole = False
            else:
                h -= top * (np.uint64(tokens[p - 1]) + np.uint64(1))
                h = h * MULT + t + np.uint64(1)
        else:
            h = np.uint64(0)
            for i in range(p, p + w):
                t = np.uint64(tokens[i])
                if t == INVALID or np.int64(t) == sep:
                    whole = False
                    break
                h = h * MULT + t + np.uint64(1)
        last = p if whole else np.int64(-2)
        if whole:
            out[j] = _in_set(mix1(h) >> np.uint64(1), tab, mask, bits, bmask)


@compiled(cache=True, nogil=True)
def windows_without_id(tokens: U32s, ids: U32s, w: int, out: Array, most: int) -> int:
    """Writes to ``out`` the starts p of the separator-free windows tokens[p:p+w] whose
    ids[p] is INVALID, in order; returns how many, or -1 once over ``most``."""
    run = 0
    m = 0
    for i in range(len(tokens)):
        run = run + 1 if tokens[i] != INVALID else 0
        if run >= w and ids[i - w + 1] == INVALID:
            if m == most:
                return -1
            out[m] = i - w + 1
            m += 1
    return m


@compiled(cache=True)
def fill_bits(bits: U64s, hashes: U64s) -> None:
    """Set each hash's bit in a bitmap for `windows_in_set`."""
    bmask = np.uint64(len(bits) * 64 - 1)
    for i in range(len(hashes)):
        b = _bit_of(hashes[i], bmask)
        bits[b >> np.uint64(6)] |= np.uint64(1) << (b & np.uint64(63))


@compiled(cache=True, nogil=True)
def find_anchored(tokens: U32s, w: int, offsets: Array, out: Array) -> int:
    """Starts p of the windows tokens[p:p+w] that hold an anchor: a token t at p + r with
    bit r of offsets[t] set (tokens >= len(offsets) are no anchor). Writes them to out
    (unsorted, maybe repeated); returns how many, or -1 when more than len(out)."""
    n_off = len(offsets)
    last = len(tokens) - w
    cap = len(out)
    n = 0
    for j in range(len(tokens)):
        t = tokens[j]
        if t < n_off and offsets[t]:
            m = offsets[t]
            for r in range(w):
                if (m >> r) & 1:
                    p = j - r
                    if 0 <= p <= last:
                        if n == cap:
                            return -1
                        out[n] = p
                        n += 1
    return n
