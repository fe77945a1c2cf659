"""The f-gram index: exact, memory-mappable lookups of f-gram ids (numpy only).

Format (``OUT/index/``, written by ``fgram index OUT``)
------------------------------------------------------
- ``index.json``: ``{"format": "fgram-index", "version": 1, "max_len": K,
  "fgrams": S, "table": <manifest fingerprint>, "lengths": {"L": {"n": rows,
  "slots": 2**b}}}``.
- For each length L in 2..K, two ``.npy`` arrays of ``slots`` entries, an
  open-addressing hash table with linear probing (plus 64 overflow slots,
  so a probe never wraps):
  ``keys-L.npy`` (uint64; 2**64-1 = empty) and ``ids-L.npy`` (int64 fgram_id).
- The key of an L-gram is chained through its prefix, which is an f-gram too
  (the table is closed under prefixes): ``mix(prefix_id << 32 | last token)``,
  where ``prefix_id`` is the fgram_id of its (L-1)-prefix, or its first token
  when L = 2; ``mix`` is `kernels.mix`, a bijection, so keys never collide.
  The slot of a key is its top b bits.

``np.load(..., mmap_mode="r")`` opens the arrays without reading them, so
every process on a machine shares one copy through the page cache.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from . import kernels as kn
from .errors import FgramError
from .workdir import save_array, save_json

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
OVERFLOW = 64


class HashTable:
    """Open addressing over uniformly mixed uint64 keys, vectorised probes."""

    def __init__(self, keys: np.ndarray, vals: np.ndarray):
        self.keys, self.vals = keys, vals
        self.bits = int(np.log2(len(keys) - OVERFLOW))
        self.shift = np.uint64(64 - self.bits)

    @classmethod
    def build(cls, keys: np.ndarray, vals: np.ndarray) -> "HashTable":
        n = len(keys)
        bits = max(4, int(np.ceil(np.log2(max(n, 1) * 2))))
        tkeys = np.full((1 << bits) + OVERFLOW, EMPTY, dtype=np.uint64)
        tvals = np.full(len(tkeys), -1, dtype=np.int64)
        slot = (keys >> np.uint64(64 - bits)).astype(np.int64)
        todo = np.arange(n)
        while len(todo):
            free = tkeys[slot] == EMPTY
            slots, first = np.unique(slot[free], return_index=True)
            winners = todo[free][first]
            tkeys[slots] = keys[winners]
            tvals[slots] = vals[winners]
            placed = np.zeros(n, dtype=bool)
            placed[winners] = True
            rest = ~placed[todo]
            todo, slot = todo[rest], slot[rest] + 1
            if len(slot) and slot.max() >= len(tkeys):
                raise FgramError("internal: hash table overflow area exhausted")
        return cls(tkeys, tvals)

    def find(self, q: np.ndarray) -> np.ndarray:
        """Value of each query key, -1 where absent."""
        if len(q) == 0:
            return np.zeros(0, dtype=np.int64)
        slot = (q >> self.shift).astype(np.int64)
        k = self.keys[slot]
        out = self.vals[slot]          # most keys sit in their first slot
        miss = k != q
        out[miss] = -1
        active = np.flatnonzero(miss & (k != EMPTY))
        slot = slot[active] + 1
        while len(active):
            k = self.keys[slot]
            qa = q[active]
            hit = k == qa
            out[active[hit]] = self.vals[slot[hit]]
            more = ~hit & (k != EMPTY)
            active, slot = active[more], slot[more] + 1
        return out


def chain_key(prefix: np.ndarray, last: np.ndarray) -> np.ndarray:
    return kn.mix((np.asarray(prefix, np.uint64) << np.uint64(32)) | np.asarray(last, np.uint64))


def manifest_fingerprint(out: str) -> str:
    with open(os.path.join(out, "manifest.json"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def write_index(out: str) -> dict:
    """Build OUT/index/ from OUT/fgrams/ (one process; the table is read length by length)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if not os.path.exists(os.path.join(out, "_SUCCESS")):
        raise FgramError(f"{out}: not a finished fgram build (no _SUCCESS)")
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    max_len = manifest["config"]["max_len"]
    dataset = ds.dataset(os.path.join(out, "fgrams"), format="parquet")
    final = os.path.join(out, "index")
    tmp = final + ".tmp"
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tables: dict[int, HashTable] = {}
    meta = {"format": "fgram-index", "version": 1, "max_len": max_len,
            "fgrams": manifest["fgrams"], "table": manifest_fingerprint(out), "lengths": {}}
    for length in range(2, max_len + 1):
        t = dataset.to_table(columns=["fgram_id", "tokens"], filter=pc.field("length") == length)
        ids = t.column("fgram_id").to_numpy()
        flat = pc.list_flatten(t.column("tokens")).to_numpy() if t.num_rows else np.zeros(0, np.int32)
        toks = flat.reshape(-1, length).astype(np.int64)
        prefix = _chain_ids(tables, toks[:, :-1]) if len(toks) else np.zeros(0, np.int64)
        if len(prefix) and prefix.min() < 0:
            raise FgramError(f"{out}: the f-gram table is not closed under prefixes")
        table = HashTable.build(chain_key(prefix, toks[:, -1]) if len(toks) else
                                np.zeros(0, np.uint64), ids)
        save_array(os.path.join(tmp, f"keys-{length}.npy"), table.keys)
        save_array(os.path.join(tmp, f"ids-{length}.npy"), table.vals)
        tables[length] = table
        meta["lengths"][str(length)] = {"n": int(len(ids)), "slots": 1 << table.bits}
    save_json(os.path.join(tmp, "index.json"), meta)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)
    return meta


def _chain_ids(tables: dict[int, HashTable], toks: np.ndarray) -> np.ndarray:
    """fgram_id of each row of tokens (2 or more columns), -1 where not an f-gram."""
    ids = toks[:, 0].astype(np.int64)
    for j in range(1, toks.shape[1]):
        ok = ids >= 0
        nxt = np.full(len(ids), -1, dtype=np.int64)
        table = tables.get(j + 1)
        if table is not None and ok.any():
            nxt[ok] = table.find(chain_key(ids[ok], toks[ok, j]))
        ids = nxt
    return ids


class FgramIndex:
    """Exact f-gram lookups over a build output. ``FgramIndex.open(OUT)``."""

    def __init__(self, tables: dict[int, HashTable], meta: dict):
        self.tables = tables
        self.meta = meta
        self.max_len = meta["max_len"]

    @classmethod
    def open(cls, out: str) -> "FgramIndex":
        folder = os.path.join(out, "index")
        path = os.path.join(folder, "index.json")
        if not os.path.exists(path):
            raise FgramError(f"{out}: no index; run `fgram index {out}` first")
        with open(path) as fh:
            meta = json.load(fh)
        if meta.get("format") != "fgram-index" or meta.get("version") != 1:
            raise FgramError(f"{path}: not an fgram index of version 1")
        if os.path.exists(os.path.join(out, "manifest.json")) and \
                manifest_fingerprint(out) != meta["table"]:
            raise FgramError(f"{out}: the index was built for another f-gram table; rebuild it")
        tables = {}
        for length in range(2, meta["max_len"] + 1):
            keys = np.load(os.path.join(folder, f"keys-{length}.npy"), mmap_mode="r")
            vals = np.load(os.path.join(folder, f"ids-{length}.npy"), mmap_mode="r")
            tables[length] = HashTable(keys, vals)
        return cls(tables, meta)

    def ids(self, ngrams: list) -> np.ndarray:
        """fgram_id of each n-gram (a sequence of token ids), -1 where it is not an f-gram."""
        out = np.full(len(ngrams), -1, dtype=np.int64)
        by_len: dict[int, list[int]] = {}
        for i, g in enumerate(ngrams):
            by_len.setdefault(len(g), []).append(i)
        for length, rows in by_len.items():
            if 2 <= length <= self.max_len:
                toks = np.array([ngrams[i] for i in rows], dtype=np.int64).reshape(len(rows), length)
                out[rows] = _chain_ids(self.tables, toks)
        return out

    def match(self, tokens, doc_starts=None) -> tuple[np.ndarray, np.ndarray]:
        """For every position, the longest f-gram ending there: (fgram_id or -1, length or 1).

        ``doc_starts``: positions where documents start (matches never cross them).
        """
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        fid = np.full(n, -1, dtype=np.int64)
        mlen = np.ones(n, dtype=np.uint8)
        if n < 2:
            return fid, mlen
        if doc_starts is not None and len(doc_starts):
            flags = np.zeros(n, dtype=np.int64)
            flags[np.asarray(doc_starts, dtype=np.int64)] = 1
            seg = np.cumsum(flags)
        else:
            seg = None
        start = np.arange(n - 1)                     # candidate start positions
        cur = tokens[:-1].copy()                     # id of the (L-1)-gram at each start
        for length in range(2, self.max_len + 1):
            end = start + length - 1
            keep = end < n
            if seg is not None:
                keep &= seg[np.minimum(end, n - 1)] == seg[start]
            start, cur, end = start[keep], cur[keep], end[keep]
            if not len(start):
                break
            ids = self.tables[length].find(chain_key(cur, tokens[end]))
            hit = ids >= 0
            start, cur, end = start[hit], ids[hit], end[hit]
            fid[end] = cur
            mlen[end] = length
        return fid, mlen
