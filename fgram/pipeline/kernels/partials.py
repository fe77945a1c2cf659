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

All keys are made by one `keys.KeyCode` per store (`store_code`): a fixed
bijection of (prefix id << last_bits | last token), 32 + 16 bits when every
shard holds 16-bit tokens (its count sorts one word per position), else 32 +
32 (`WIDE`); sorted ascending, uniform over the key space (ranges split evenly).
"""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import Array, I64s, U64s, compiled
from fgram.pipeline.kernels.keys import INVALID, WIDE, KeyCode
from fgram.pipeline.kernels.merging import key_slice, lookup_sorted, merge_counts

EMPTY_KEYS = np.zeros(0, np.uint64)
EMPTY_COUNTS = np.zeros(0, np.int64)


def slice_run(
    keys: np.ndarray, counts: np.ndarray, lo: int, hi: int | None
) -> tuple[np.ndarray, np.ndarray]:
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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
        m, bad = combine_runs(bk, bc, dkeys[d0:d1], dcounts[d0:d1], floor, ok, oc)
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

    def additions(
        self, frequent: np.ndarray, absent: np.ndarray, prefix: IdTable | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frequent keys (sorted) that T_k lacks (``absent``: where `lookup` found
        none) as a new chunk (keys, ids, tokens), ids after the existing ones.
        ``prefix``: T_{k-1} (None for k = 2: prefixes are tokens)."""
        new_keys = frequent[absent]
        rows = key_rows(self.code, new_keys, prefix)
        ids = np.arange(self.size, self.size + len(new_keys), dtype=np.uint32)
        return new_keys, ids, rows

    def merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All chunks as one (keys, ids, tokens) chunk."""
        keys = np.concatenate([c[0] for c in self.chunks])
        ids = np.concatenate([c[1] for c in self.chunks])
        order = np.argsort(keys)
        return keys[order], ids[order], self.tokens()


def key_rows(code: KeyCode, keys: np.ndarray, prefix: IdTable | None) -> np.ndarray:
    """The token rows of k-gram keys: their prefixes' rows in ``prefix`` (T_{k-1}; None
    for k = 2: prefixes are tokens) and their last tokens."""
    first, last = code.decode(keys)
    rows = first[:, None].astype(np.uint32) if prefix is None else prefix.tokens()[first]
    return np.concatenate([rows, last[:, None].astype(np.uint32)], axis=1)


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


@compiled(cache=True, nogil=True)
def combine_runs(
    bk: U64s, bc: Array, dk: U64s, dc: I64s, floor: int, ok: U64s, oc: I64s
) -> tuple[int, bool]:
    """Totals of a base run (distinct sorted keys, counts) and a delta run (signed counts)
    in one merge pass; writes the keys whose total is >= floor into ok/oc.
    Returns (number written, whether a total went negative)."""
    i = 0
    j = 0
    m = 0
    nb = len(bk)
    nd = len(dk)
    bad = False
    while i < nb or j < nd:
        if j >= nd or (i < nb and bk[i] < dk[j]):
            key = bk[i]
            t = np.int64(bc[i])
            i += 1
        elif i >= nb or dk[j] < bk[i]:
            key = dk[j]
            t = np.int64(dc[j])
            j += 1
        else:
            key = bk[i]
            t = np.int64(bc[i]) + np.int64(dc[j])
            i += 1
            j += 1
        if t < 0:
            bad = True
        if t >= floor:
            ok[m] = key
            oc[m] = t
            m += 1
    return m, bad
