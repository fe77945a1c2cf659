"""The f-gram index: exact, memory-mappable lookups of f-gram ids.

Format (``OUT/index/``, written by ``fgram index OUT``)
------------------------------------------------------
- ``index.json``: ``{"format": "fgram-index", "version": 2, "max_len": K,
  "fgrams": S, "table": <manifest fingerprint>, "lengths": {"L": {"n": rows,
  "slots": 2**b}}}``.
- For each length L in 2..K, ``table-L.npy``: uint64 ``[slots + 64, 2]``,
  rows ``(key, fgram_id)``, an open-addressing hash table with linear
  probing (plus 64 overflow rows, so a probe never wraps); key 2**64-1 =
  empty. A key and its id share a cache line: one memory access a probe.
- The key of an L-gram is chained through its prefix, which is an f-gram too
  (the table is closed under prefixes): ``mix(prefix_id << 32 | last token)``,
  where ``prefix_id`` is the fgram_id of its (L-1)-prefix, or its first token
  when L = 2; ``mix`` is `kernels.mix`, a bijection, so keys never collide.
  The first slot of a key is its top b bits.
- ``suffix.npy``: int32 (int64 if S >= 2**31) ``[S]``: the fgram_id of each
  f-gram without its first token (the table is closed under suffixes too),
  -1 for length 2. `match` follows these links.

``np.load(..., mmap_mode="r")`` opens the arrays without reading them, so
every process on a machine shares one copy through the page cache.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from . import compiled
from . import kernels as kn
from .errors import FgramError
from .workdir import save_array, save_json

EMPTY = compiled.EMPTY
OVERFLOW = 64
VERSION = 2


class HashTable:
    """Open addressing over uniformly mixed uint64 keys: flat rows of (key, value)."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows                       # [slots + OVERFLOW, 2] uint64
        self.flat = rows.reshape(-1)
        self.bits = int(np.log2(len(rows) - OVERFLOW))
        self.shift = np.uint64(64 - self.bits)

    @classmethod
    def build(cls, keys: np.ndarray, vals: np.ndarray) -> "HashTable":
        """From distinct keys and their (non-negative) values."""
        bits = max(4, int(np.ceil(np.log2(max(len(keys), 1) * 2))))
        rows = np.full(((1 << bits) + OVERFLOW, 2), EMPTY, dtype=np.uint64)
        ok = compiled.fill_table(rows.reshape(-1), np.uint64(64 - bits),
                                 np.asarray(keys, np.uint64), np.asarray(vals, np.int64))
        if not ok:
            raise FgramError("internal: hash table overflow area exhausted")
        return cls(rows)

    def find(self, q: np.ndarray) -> np.ndarray:
        """Value of each query key, -1 where absent."""
        out = np.empty(len(q), dtype=np.int64)
        compiled.find_keys(self.flat, self.shift, np.asarray(q, np.uint64), out)
        return out


def chain_key(prefix: np.ndarray, last: np.ndarray) -> np.ndarray:
    return kn.mix((np.asarray(prefix, np.uint64) << np.uint64(32)) | np.asarray(last, np.uint64))


def check_mode(mode: str) -> None:
    if mode not in ("mmap", "ram"):
        raise ValueError(f"mode must be 'mmap' or 'ram', not {mode!r}")


def read_meta(path: str, fmt: str, version: int, make: str) -> dict:
    """The metadata JSON of an output part, checked for its format and version.

    ``make``: the command that writes it (named in the errors)."""
    if not os.path.exists(path):
        raise FgramError(f"{path}: missing; run `{make}` first")
    with open(path) as fh:
        meta = json.load(fh)
    if meta.get("format") != fmt or meta.get("version") != version:
        raise FgramError(f"{path}: not {fmt} of version {version}; rebuild it with `{make}`")
    return meta


def manifest_fingerprint(out: str) -> str:
    with open(os.path.join(out, "manifest.json"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def write_index(out: str) -> dict:
    """Build OUT/index/ from OUT/fgrams/ (one process; the table is read length by length)."""
    import shutil

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
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    total = int(manifest["fgrams"])
    suffix = np.full(total, -1, dtype=np.int32 if total < 2**31 else np.int64)
    tables: dict[int, HashTable] = {}
    meta = {"format": "fgram-index", "version": VERSION, "max_len": max_len,
            "fgrams": total, "table": manifest_fingerprint(out), "lengths": {}}
    for length in range(2, max_len + 1):
        t = dataset.to_table(columns=["fgram_id", "tokens"], filter=pc.field("length") == length)
        ids = t.column("fgram_id").to_numpy()
        flat = pc.list_flatten(t.column("tokens")).to_numpy() if t.num_rows else np.zeros(0, np.int32)
        toks = flat.reshape(-1, length).astype(np.int64)
        prefix = _chain_ids(tables, toks[:, :-1])
        if len(prefix) and prefix.min() < 0:
            raise FgramError(f"{out}: the f-gram table is not closed under prefixes")
        if length > 2 and len(ids):
            suf = _chain_ids(tables, toks[:, 1:])
            if suf.min() < 0:
                raise FgramError(f"{out}: the f-gram table is not closed under suffixes")
            suffix[ids] = suf
        table = HashTable.build(chain_key(prefix, toks[:, -1]), ids)
        save_array(os.path.join(tmp, f"table-{length}.npy"), table.rows)
        tables[length] = table
        meta["lengths"][str(length)] = {"n": int(len(ids)), "slots": 1 << table.bits}
    save_array(os.path.join(tmp, "suffix.npy"), suffix)
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

    def __init__(self, tables: dict[int, HashTable], suffix: np.ndarray, meta: dict):
        self.tables = tables
        self.suffix = suffix
        self.meta = meta
        self.max_len = meta["max_len"]
        self._flat = tuple(tables[L].flat for L in range(2, self.max_len + 1))
        self._shifts = np.array([tables[L].shift for L in range(2, self.max_len + 1)], np.uint64)

    @classmethod
    def open(cls, out: str, mode: str = "mmap") -> "FgramIndex":
        """``mode="mmap"`` maps the arrays (shared through the page cache, opens in
        milliseconds); ``"ram"`` reads them into this process's memory (huge pages
        where the OS allows: faster lookups, a private copy)."""
        check_mode(mode)
        folder = os.path.join(out, "index")
        meta = read_meta(os.path.join(folder, "index.json"), "fgram-index", VERSION,
                         f"fgram index {out}")
        if os.path.exists(os.path.join(out, "manifest.json")) and \
                manifest_fingerprint(out) != meta["table"]:
            raise FgramError(f"{out}: the index was built for another f-gram table; rebuild it")

        def load(name: str) -> np.ndarray:
            arr = np.load(os.path.join(folder, name), mmap_mode="r")
            return np.array(arr) if mode == "ram" else np.asarray(arr)

        tables = {L: HashTable(load(f"table-{L}.npy")) for L in range(2, meta["max_len"] + 1)}
        return cls(tables, load("suffix.npy"), meta)

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

    def match(self, tokens, doc_starts=None, lanes: int = compiled.LANES
              ) -> tuple[np.ndarray, np.ndarray]:
        """For every position, the longest f-gram ending there: (fgram_id or -1, length or 1).

        ``doc_starts``: positions where documents start (matches never cross them).
        ``lanes``: how many stretches of the input are matched side by side
        (any value gives the same result; it only changes the speed).
        """
        tokens = np.asarray(tokens)
        n = len(tokens)
        if n and (tokens.min() < 0 or tokens.max() > kn.MAX_TOKEN):
            raise ValueError(f"token ids must be in 0..{kn.MAX_TOKEN}")
        marked = tokens.astype(np.uint32)              # the top bit marks document starts
        if doc_starts is not None and len(doc_starts):
            marked[np.asarray(doc_starts, dtype=np.int64)] |= np.uint32(1 << 31)
        fid = np.empty(n, dtype=np.int64)
        mlen = np.empty(n, dtype=np.uint8)
        lanes = max(1, min(int(lanes), n))
        compiled.match_longest(marked, self.max_len, self._flat, self._shifts,
                               self.suffix, fid, mlen, lanes)
        return fid, mlen
