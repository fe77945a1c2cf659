"""Partial counts kept between refreshes, and the pure kernels of an incremental refresh.

The refresh store (see `jobs/refresh.py`) keeps, per n-gram length k:

- the id table T_k: every k-gram that was ever frequent in a version, with a
  stable id (new ones are appended, never renumbered), its key
  ``code.encode(id of its (k-1)-prefix, last token)`` and its tokens;
- every shard's partial counts of its candidate k-grams: those whose
  (k-1)-prefix and (k-1)-suffix both have an id in T_{k-1} (the invariant that
  makes reuse exact), as sorted (key, count) runs;
- the aggregate of the current version's shards: a base (large, sorted key
  ranges) plus a delta (the sum of what changed since the base was written,
  counts may be negative), so that a refresh reads and writes only what changed.

All keys are made by one `kernels.KeyCode` per store (`store_code`): a fixed
bijection of (prefix id << last_bits | last token), 32 + 16 bits when every
shard holds 16-bit tokens (its count sorts one word per position), else 32 +
32 (`WIDE`); sorted ascending, uniform over the key space (ranges split evenly).
"""

from __future__ import annotations

import numpy as np

from . import compiled as cc
from .kernels import INVALID, WIDE, KeyCode, key_slice, lookup_sorted, merge_counts

EMPTY_KEYS = np.zeros(0, np.uint64)
EMPTY_COUNTS = np.zeros(0, np.int64)


def slice_run(keys: np.ndarray, counts: np.ndarray, lo: int, hi: int | None):
    """The entries of a sorted run with keys in [lo, hi) (hi None: to the end): views
    (of a memory map: nothing is read but the two binary searches' pages)."""
    a, b = key_slice(keys, lo, hi)
    return keys[a:b], counts[a:b]


def signed_sum(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum sorted runs of (key, signed count) into one sorted run without zero counts."""
    runs = [(k, np.asarray(c, np.int64)) for k, c in runs if len(k)]
    if not runs:
        return EMPTY_KEYS, EMPTY_COUNTS
    keys, counts = merge_counts(runs)
    nz = counts != 0
    if not nz.all():
        keys, counts = keys[nz], counts[nz]
    return keys, counts


def _at(values: np.ndarray, at: np.ndarray, missing: int = 0) -> np.ndarray:
    """values[at] where at >= 0 (an index from `lookup_sorted`), ``missing`` elsewhere."""
    if not len(values):
        return np.full(len(at), missing, np.int64)
    return np.where(at >= 0, values[np.maximum(at, 0)], missing)


COMBINE_CHUNK = 1 << 22  # base entries merged per call (bounds the output buffers)


def combine(
    base: tuple[np.ndarray, np.ndarray],
    delta: tuple[np.ndarray, np.ndarray],
    fresh: tuple[np.ndarray, np.ndarray],
    floor: int,
):
    """One key range of a refreshed length: totals = base + delta (delta: every change
    since the base, signed), and ``fresh`` (the counts of the new shards alone).

    Returns ``(keys, counts, fresh_counts)`` of the keys whose total is >= floor
    (sorted), in one compiled merge pass over the base (read, not written).
    """
    bkeys, bcounts = base
    dkeys, dcounts = delta
    dkeys = np.ascontiguousarray(dkeys, np.uint64)
    dcounts = np.ascontiguousarray(dcounts, np.int64)
    outs_k, outs_c = [], []
    d0 = 0
    for b0 in range(0, max(len(bkeys), 1), COMBINE_CHUNK):
        b1 = min(b0 + COMBINE_CHUNK, len(bkeys))
        d1 = len(dkeys) if b1 == len(bkeys) else int(np.searchsorted(dkeys, bkeys[b1]))
        bk = np.ascontiguousarray(bkeys[b0:b1], np.uint64)
        bc = np.ascontiguousarray(bcounts[b0:b1])
        ok = np.empty(len(bk) + d1 - d0, np.uint64)
        oc = np.empty(len(ok), np.int64)
        m, bad = cc.combine_runs(bk, bc, dkeys[d0:d1], dcounts[d0:d1], floor, ok, oc)
        if bad:
            raise ValueError("a partial count went negative: the store does not match its shards")
        outs_k.append(ok[:m])
        outs_c.append(oc[:m])
        d0 = d1
    keys, counts = np.concatenate(outs_k), np.concatenate(outs_c)
    fkeys, fcounts = fresh
    fresh_counts = _at(np.asarray(fcounts), lookup_sorted(fkeys, keys)).astype(np.int64)
    return keys, counts, fresh_counts


class IdTable:
    """T_k: chunks of (sorted keys, their ids, tokens in id order), each chunk one
    refresh's additions (ids ``start .. start+n-1``), so a refresh writes only what
    it adds. Keys are distinct across chunks."""

    def __init__(
        self, k: int, chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]], code: KeyCode = WIDE
    ):
        self.k = k
        self.chunks = chunks
        self.code = code
        self.size = sum(len(c[1]) for c in chunks)
        self._tokens: np.ndarray | None = None

    def lookup(self, sorted_queries: np.ndarray) -> np.ndarray:
        """Ids (INVALID where absent) of sorted keys: one merge-join per chunk."""
        out = np.full(len(sorted_queries), int(INVALID), np.uint32)
        for keys, ids, _ in self.chunks:
            if len(sorted_queries) * 20 < len(keys):  # few queries: binary searches
                at = np.minimum(np.searchsorted(keys, sorted_queries), len(keys) - 1)
                hit = keys[at] == sorted_queries if len(keys) else np.zeros(len(at), bool)
            else:  # else one merge pass over the chunk
                at = lookup_sorted(keys, sorted_queries)
                hit = at >= 0
            out[hit] = ids[at[hit]]
        return out

    def lookup_any(self, queries: np.ndarray) -> np.ndarray:
        """`lookup` of keys in any order."""
        order = np.argsort(queries)
        out = np.empty(len(queries), np.uint32)
        out[order] = self.lookup(queries[order])
        return out

    def tokens(self) -> np.ndarray:
        """Every row's tokens, in id order (a (size, k) uint32 array)."""
        if self._tokens is None:
            parts = [np.asarray(t).reshape(-1, self.k) for _, _, t in self.chunks]
            self._tokens = (
                parts[0]
                if len(parts) == 1
                else np.concatenate(parts)
                if parts
                else np.zeros((0, self.k), np.uint32)
            )
        return self._tokens

    def additions(self, frequent: np.ndarray, absent: np.ndarray, prefix: IdTable | None):
        """The frequent keys (sorted) that T_k lacks (``absent``: where `lookup` found
        none) as a new chunk (keys, ids, tokens), ids after the existing ones.
        ``prefix``: T_{k-1} (None for k = 2: prefixes are tokens)."""
        new_keys = frequent[absent]
        first, last = self.code.decode(new_keys)
        rows = first[:, None].astype(np.uint32) if prefix is None else prefix.tokens()[first]
        rows = np.concatenate([rows, last[:, None].astype(np.uint32)], axis=1)
        ids = np.arange(self.size, self.size + len(new_keys), dtype=np.uint32)
        return new_keys, ids, rows

    def merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All chunks as one (keys, ids, tokens) chunk."""
        keys = np.concatenate([c[0] for c in self.chunks])
        ids = np.concatenate([c[1] for c in self.chunks])
        order = np.argsort(keys)
        return keys[order], ids[order], self.tokens()


def chain_ids(windows: np.ndarray, tables: list[IdTable]) -> np.ndarray:
    """Ids of token windows (rows of w tokens) in T_w, INVALID where a window has none.

    ``tables[j]`` = T_{j+2}; a window's id is found by chaining: the id of its
    first j+1 tokens and its (j+2)-th token make the key of its first j+2
    tokens. Exact (no hashing); each step merge-joins the sorted queries with
    the table's chunks."""
    n, w = windows.shape
    ids = windows[:, 0].astype(np.int64)
    valid = windows[:, 0] != INVALID
    for j in range(1, w):
        found = tables[j - 1].lookup_any(
            tables[j - 1].code.encode(np.where(valid, ids, 0), windows[:, j])
        )
        valid &= (found != INVALID) & (windows[:, j] != INVALID)
        ids = np.where(valid, found, 0).astype(np.int64)
    return np.where(valid, ids, int(INVALID)).astype(np.uint32)


SET_BITS = 1 << 21  # at least a 256 KiB bitmap (a core's L2 cache) ...
SET_BITS_PER_ROW = 64  # ... and sparse enough that few windows probe the table


def window_set(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of token windows (rows) as an open-addressing set and a bitmap
    filter in front of it, for `scan_unit`."""
    rows = np.ascontiguousarray(rows, np.uint32)
    hashes = np.empty(len(rows), np.uint64)
    cc.hash_rows(rows, hashes)
    tab = np.full(1 << max(int(2 * len(rows)).bit_length(), 4), cc.EMPTY, np.uint64)
    cc.fill_set(tab, hashes)
    bits = np.zeros(
        max(SET_BITS, 1 << int(SET_BITS_PER_ROW * len(rows)).bit_length()) // 64, np.uint64
    )
    cc.fill_bits(bits, hashes)
    return tab, bits


ANCHOR_STRIDE = 61  # a unit's token frequencies are estimated from every 61st token
ANCHOR_SHARE = 1 / 32  # anchored starts only while they are at most this share of windows


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
    m = cc.anchored_starts(tokens, w, offsets, out)
    return None if m < 0 else out[:m]


def scan_unit(
    tokens: np.ndarray,
    limit: int,
    k: int,
    new_set: tuple[np.ndarray, np.ndarray],
    tables: list[IdTable],
    old_size: int,
    starts: np.ndarray | None = None,
):
    """Counts, in one unit of a kept shard, of the candidate k-grams it was never
    counted for: those whose (k-1)-prefix or (k-1)-suffix got its id in this refresh
    (id >= ``old_size``, its window in ``new_set``), the other one having an id too.

    One compiled pass marks the windows that hash into the set (only those at
    ``starts`` when given: a superset of where the set's windows occur); only
    the few marked positions are then checked exactly by chained id lookups
    (``tables`` = T_2..T_{k-1}). Returns sorted (keys, counts)."""
    w = k - 1
    n_pos = len(tokens) - k + 1
    if n_pos <= 0 or len(tables) < w - 1:
        return EMPTY_KEYS, EMPTY_COUNTS
    tokens = np.ascontiguousarray(tokens, np.uint32)
    if starts is None:
        marked = np.zeros(len(tokens) - w + 1, bool)
        cc.windows_in_set(tokens, w, new_set[0], new_set[1], marked)
        hits = np.flatnonzero(marked)
    else:
        marked = np.zeros(len(starts), bool)
        cc.windows_at_in_set(tokens, w, starts, new_set[0], new_set[1], marked)
        hits = starts[marked].astype(np.int64)
    # a k-gram at p has its prefix window at p or its suffix window at p + 1
    pos = np.union1d(hits, hits - 1)
    pos = pos[(pos >= 0) & (pos < min(n_pos, limit))]
    if not len(pos):
        return EMPTY_KEYS, EMPTY_COUNTS
    span = pos[:, None] + np.arange(k)
    grams = tokens[span]
    a = chain_ids(grams[:, :w], tables)
    b = chain_ids(grams[:, 1:], tables)
    ok = (a != INVALID) & (b != INVALID) & ((a >= old_size) | (b >= old_size))
    keys = tables[-1].code.encode(a[ok], grams[ok, w])
    keys, counts = np.unique(keys, return_counts=True)
    return keys, counts.astype(np.int64)
