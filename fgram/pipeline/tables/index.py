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
  when L = 2; ``mix`` is `keys.mix`, a bijection, so keys never collide.
  The first slot of a key is its top b bits.
- ``suffix.npy``: int32 (int64 if S >= 2**31) ``[S]``: the fgram_id of each
  f-gram without its first token (the table is closed under suffixes too),
  -1 for length 2. `match` follows these links.

``np.load(..., mmap_mode="r")`` opens the arrays without reading them, so
every process on a machine shares one copy through the page cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fgram.pipeline.config.options import OPEN_MODE
from fgram.pipeline.errors import FgramError
from fgram.pipeline.io.cache import cache_dir, cached_copy, file_record, file_xxh3
from fgram.pipeline.io.failures import first_line
from fgram.pipeline.io.publish import as_location, commit_generation, discard, generation_name, here
from fgram.pipeline.io.storage import Location, json_bytes
from fgram.pipeline.io.workdir import save_array, save_json
from fgram.pipeline.kernels import jit, matching
from fgram.pipeline.kernels.keys import EMPTY, MAX_TOKEN, mix
from fgram.pipeline.kernels.matching import IndexArrays
from fgram.pipeline.tables.versions import (
    manifest_fingerprint,
    open_table,
    resolve_table,
    table_dataset,
)

OVERFLOW = 64
VERSION = 2


class HashTable:
    """Open addressing over uniformly mixed uint64 keys: flat rows of (key, value)."""

    def __init__(self, rows: np.ndarray, limit: int = 1 << 62, where: str = "an index"):
        self.rows = rows  # [slots + OVERFLOW, 2] uint64
        self.flat = rows.reshape(-1)
        self.bits = int(np.log2(len(rows) - OVERFLOW))
        self.shift = np.uint64(64 - self.bits)
        self.limit = limit  # the values are ids below this (the table's f-grams)
        self.where = where  # named when a probe finds the table damaged

    @classmethod
    def build(cls, keys: np.ndarray, vals: np.ndarray) -> HashTable:
        """From distinct keys and their (non-negative) values."""
        bits = max(4, int(np.ceil(np.log2(max(len(keys), 1) * 2))))
        rows = np.full(((1 << bits) + OVERFLOW, 2), EMPTY, dtype=np.uint64)
        ok = matching.fill_table(
            rows.reshape(-1),
            np.uint64(64 - bits),
            np.asarray(keys, np.uint64),
            np.asarray(vals, np.int64),
        )
        if not ok:
            raise FgramError("internal: hash table overflow area exhausted")
        return cls(rows)

    def find(self, q: np.ndarray) -> np.ndarray:
        """Value of each query key, -1 where absent."""
        out = np.empty(len(q), dtype=np.int64)
        if matching.find_keys(self.flat, self.shift, np.asarray(q, np.uint64), out, self.limit):
            raise damaged(self.where)
        return out


def damaged(where: str) -> FgramError:
    """The error of a lookup that found the index damaged (`matching.DAMAGED`)."""
    return FgramError(
        f"{where}: damaged (a lookup ran past a hash table or found an id out of range); "
        f"`fgram verify` names the file; rebuild it with `fgram index --overwrite`"
    )


def chain_key(prefix: np.ndarray, last: np.ndarray) -> np.ndarray:
    return mix((np.asarray(prefix, np.uint64) << np.uint64(32)) | np.asarray(last, np.uint64))


def check_mode(mode: str) -> None:
    if mode not in ("mmap", "ram"):
        raise ValueError(f"mode must be 'mmap' or 'ram', not {mode!r}")


def read_meta(path: Location, fmt: str, version: int, make: str) -> dict[str, Any]:
    """The metadata JSON of an output part (a path or a `Location`), checked for its
    format and version. ``make``: the command that writes it (named in the errors)."""
    loc = as_location(path)
    if not loc.exists():
        raise FgramError(f"{loc.uri}: missing; run `{make}` first")
    meta: dict[str, Any] = loc.read_json()
    if meta.get("format") != fmt or meta.get("version") != version:
        raise FgramError(f"{loc.uri}: not {fmt} of version {version}; rebuild it with `{make}`")
    return meta


def write_index(out: str | Location, storage: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build OUT/index/ from the table at OUT (a build output or a refresh folder; a path
    or a URI): one process, the table read length by length.

    Local: written aside, then renamed into place. On an object store: the arrays
    under names of their own (``table-L-<gen>.npy``, with their sha256 in index.json),
    then index.json (the switch), then the older index's objects are deleted."""
    import tempfile

    import pyarrow.compute as pc

    loc, manifest = open_table(out, storage)
    max_len = manifest["config"]["max_len"]
    dataset = table_dataset(loc, manifest)
    final = loc.child("index")
    tmp = final.path + ".tmp" if loc.local else tempfile.mkdtemp(prefix="fgram-index-")
    discard(tmp)
    os.makedirs(tmp)
    parts = here(tmp)  # the arrays written aside, then renamed or uploaded
    total = int(manifest["fgrams"])
    suffix = np.full(total, -1, dtype=np.int32 if total < 2**31 else np.int64)
    tables: dict[int, HashTable] = {}
    meta = {
        "format": "fgram-index",
        "version": VERSION,
        "max_len": max_len,
        "fgrams": total,
        "table": manifest_fingerprint(loc),
        "lengths": {},
    }
    for length in range(2, max_len + 1):
        t = dataset.to_table(columns=["fgram_id", "tokens"], filter=pc.field("length") == length)
        ids = t.column("fgram_id").to_numpy()
        flat = (
            pc.list_flatten(t.column("tokens")).to_numpy() if t.num_rows else np.zeros(0, np.int32)
        )
        toks = flat.reshape(-1, length).astype(np.int64)
        prefix = _chain_ids(tables, toks[:, :-1])
        if len(prefix) and prefix.min() < 0:
            raise FgramError(f"{loc.uri}: the f-gram table is not closed under prefixes")
        if length > 2 and len(ids):
            suf = _chain_ids(tables, toks[:, 1:])
            if suf.min() < 0:
                raise FgramError(f"{loc.uri}: the f-gram table is not closed under suffixes")
            suffix[ids] = suf
        table = HashTable.build(chain_key(prefix, toks[:, -1]), ids)
        save_array(parts.child(f"table-{length}.npy"), table.rows)
        tables[length] = table
        meta["lengths"][str(length)] = {"n": int(len(ids)), "slots": 1 << table.bits}
    save_array(parts.child("suffix.npy"), suffix)
    if loc.local:
        meta["files"] = file_records(tmp)  # what `open` and `fgram verify` check
        save_json(parts.child("index.json"), meta)
        discard(final.path)
        os.rename(tmp, final.path)
        return meta
    try:
        publish_parts(tmp, final, meta, "index.json")
    finally:
        discard(tmp)
    return meta


def publish_parts(folder: str, dest: Location, meta: dict[str, Any], meta_name: str) -> None:
    """Upload the array files of a local ``folder`` to the object-store folder ``dest``
    under names of a new generation, with their sha256 in ``meta["files"]``, then
    ``meta`` as ``meta_name`` (the switch), then delete what is left of older ones."""
    meta["files"] = file_records(folder, uuid.uuid4().hex[:12])
    names = sorted(meta["files"])
    commit_generation(
        dest,
        {meta["files"][n]["object"]: here(folder).child(n) for n in names},
        [(meta_name, json_bytes(meta))],
    )


def file_records(folder: str, gen: str | None = None) -> dict[str, dict[str, Any]]:
    """Each file of a local ``folder`` -> its ``object`` name (of generation ``gen`` on a
    store; its own name locally), ``sha256`` and ``bytes``: what a reader checks."""
    return {
        n: {"object": generation_name(n, gen) if gen else n, **file_record(os.path.join(folder, n))}
        for n in sorted(os.listdir(folder))
    }


# files whose bytes were found as recorded, by identity (device, inode, size, mtime): a
# second open costs nothing (in this process; in later ones, a marker in the cache's
# checked/, named by the identity and the hash)
_CHECKED: dict[tuple[int, int, int, int], str] = {}


def _open_local(path: str, entry: dict[str, Any] | None, check: bool = True) -> np.ndarray:
    """A part's array memory-mapped, its size checked first against its record (a file
    cut short, or grown, is an error naming it, never a crash or a short read), then
    (``check``) every byte against the record's XXH3: once per file identity and process
    (`_CHECKED`)."""
    fix = "damaged or changed; `fgram verify` checks every file, and rebuilding it mends it"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FgramError(f"{path}: missing; {fix}") from None
    size = st.st_size
    if entry is not None and size != entry["bytes"]:
        raise FgramError(f"{path}: {size} bytes where its metadata says {entry['bytes']}: {fix}")
    if check and entry is not None and "xxh3" in entry:
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        marker = os.path.join(
            cache_dir("checked"), "-".join(map(str, identity)) + f"-{entry['xxh3']}"
        )
        if _CHECKED.get(identity) != entry["xxh3"] and not os.path.exists(marker):
            if file_xxh3(path) != entry["xxh3"]:
                raise FgramError(f"{path}: its bytes are not those written (XXH3 differs): {fix}")
            with contextlib.suppress(OSError):  # a later process's open costs nothing
                open(marker, "w").close()
        _CHECKED[identity] = entry["xxh3"]
    return _load_npy(path, path, f": {fix}", mmap_mode="r")


# what np.load raises for a damaged file: a header that does not parse (numpy reads it
# with `ast`: a SyntaxError) or describe an array, a size that does not match it
BAD_NPY = (ValueError, OSError, EOFError, SyntaxError, TypeError, KeyError)


def _load_npy(src: Any, where: str, fix: str = "", **kw: Any) -> np.ndarray:
    """``np.load`` of ``src`` (no pickles); a damaged file is one line naming ``where``."""
    try:
        arr: np.ndarray = np.load(src, allow_pickle=False, **kw)
        return arr
    except BAD_NPY as exc:
        raise FgramError(
            f"{where}: not a readable .npy array ({first_line(exc, limit=120)}){fix}"
        ) from None


def part_arrays(
    folder: Location, meta: dict[str, Any], mode: str, check: bool = True
) -> Callable[[str], np.ndarray]:
    """A loader ``name -> array`` for the files of an output part (the index, the
    embeddings). Local: memory-mapped (``mmap``) or read (``ram``). On an object
    store: ``ram`` reads each object into memory; ``mmap`` maps a local copy from
    the cache (`cache.cached_copy`: downloaded once, checked against its sha256)."""

    def load(name: str) -> np.ndarray:
        if folder.local:
            arr = _open_local(
                os.path.join(folder.path, name), meta.get("files", {}).get(name), check
            )
            return np.array(arr) if mode == "ram" else np.asarray(arr)
        entry = meta.get("files", {}).get(name)
        if entry is None:
            raise FgramError(f"{folder.uri}: {name} is not named by its metadata; rebuild it")
        obj = folder.inside(entry["object"])
        if mode == "ram":
            import io

            data = obj.read_bytes()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise FgramError(f"{obj.uri}: checksum mismatch (corrupt or changed)")
            return _load_npy(io.BytesIO(data), obj.uri)
        copy = cached_copy(obj, entry["sha256"], entry["bytes"])
        return np.asarray(_load_npy(copy, obj.uri, mmap_mode="r"))

    return load


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


def unchecked(where: str) -> None:
    """The one line an open without checks leaves (`FgramIndex.open`'s ``check``)."""
    import sys

    sys.stderr.write(
        f"fgram: warning: {where}: opened without checking its arrays (check=False): "
        f"damage there would give wrong lookups; `fgram verify --deep` checks them\n"
    )


def verify_whole(loc: Location) -> None:
    """Every file of a table, its index and embeddings, against its sha256: the first that
    is not as written is an error naming it (`verify.verify`, deep)."""
    from fgram.pipeline.tables.verify import verify

    found = verify(loc, deep=True)
    if found["problems"]:
        more = len(found["problems"]) - 1
        raise FgramError(
            f"{found['problems'][0]}{f' (and {more} more)' if more else ''}: rebuild what "
            f"is named (`fgram verify {loc.uri}` lists every file)"
        )


def check_shapes(
    where: str, meta: dict[str, Any], rows: dict[int, np.ndarray], suffix: np.ndarray
) -> None:
    """Each array as index.json describes it (its slots, the table's f-grams, the dtypes the
    kernels read): a file of another index or a damaged header is an error on open."""
    fix = "damaged or changed; rebuild it with `fgram index --overwrite`"
    for L, r in rows.items():
        slots = int(meta["lengths"].get(str(L), {}).get("slots", -OVERFLOW))
        if r.shape != (slots + OVERFLOW, 2) or r.dtype != np.uint64:
            raise FgramError(
                f"{where}/table-{L}.npy: shape {r.shape} of {r.dtype} where index.json "
                f"says ({slots + OVERFLOW}, 2) of uint64: {fix}"
            )
    if suffix.shape != (meta["fgrams"],) or suffix.dtype.kind != "i":
        raise FgramError(
            f"{where}/suffix.npy: shape {suffix.shape} of {suffix.dtype} where index.json "
            f"says ({meta['fgrams']},) of integers: {fix}"
        )


class FgramIndex:
    """Exact f-gram lookups over a build output. ``FgramIndex.open(OUT)``."""

    def __init__(self, tables: dict[int, HashTable], suffix: np.ndarray, meta: dict[str, Any]):
        self.tables = tables
        self.suffix = suffix
        self.meta = meta
        self.max_len = meta["max_len"]
        self.where = "an index"  # its folder, once opened: named by `damaged`
        lengths = range(2, self.max_len + 1)
        # what the matching kernels read (`matching.IndexArrays`)
        self.arrays: IndexArrays = (
            self.max_len,
            tuple(tables[L].flat for L in lengths),
            np.array([tables[L].shift for L in lengths], np.uint64),
            suffix,
        )

    @classmethod
    def open(
        cls,
        out: str | Location,
        mode: str = OPEN_MODE,
        storage: dict[str, Any] | None = None,
        verify: bool = False,
        check: bool = True,
    ) -> FgramIndex:
        """``out``: a build output or a refresh folder, a path or a URI (``storage``: its
        storage options). ``mode="mmap"`` maps the arrays (shared through the page cache;
        from an object store, a local copy in the cache); ``"ram"`` reads them into this
        process's memory (faster lookups, a private copy). Sizes and shapes are checked
        always, and (``check``) every byte of the arrays against the XXH3 the index
        recorded, at memory speed, once per file and process: damage is an error naming
        the file, never a wrong lookup. ``check=False`` (an index larger than memory,
        whose pages would all be read): a warning names what is left unchecked.
        ``verify``: every byte of the table too, against its sha256 (`verify_whole`)."""
        check_mode(mode)
        loc = resolve_table(out, storage)
        if verify:
            verify_whole(loc)
        folder = loc.child("index")
        meta = read_meta(
            folder.child("index.json"), "fgram-index", VERSION, f"fgram index {loc.uri}"
        )
        if loc.child("manifest.json").exists() and manifest_fingerprint(loc) != meta["table"]:
            raise FgramError(f"{loc.uri}: the index was built for another f-gram table; rebuild it")
        load = part_arrays(folder, meta, mode, check)
        if not check:
            unchecked(folder.uri)
        n, where = int(meta["fgrams"]), folder.uri
        rows = {L: load(f"table-{L}.npy") for L in range(2, meta["max_len"] + 1)}
        suffix = load("suffix.npy")
        check_shapes(where, meta, rows, suffix)
        index = cls({L: HashTable(r, n, where) for L, r in rows.items()}, suffix, meta)
        index.where = where
        return index

    def ids(self, ngrams: Sequence[Sequence[int]]) -> np.ndarray:
        """fgram_id of each n-gram (a sequence of token ids), -1 where it is not an f-gram."""
        out = np.full(len(ngrams), -1, dtype=np.int64)
        by_len: dict[int, list[int]] = {}
        for i, g in enumerate(ngrams):
            by_len.setdefault(len(g), []).append(i)
        for length, rows in by_len.items():
            if 2 <= length <= self.max_len:
                toks = np.array([ngrams[i] for i in rows], dtype=np.int64).reshape(
                    len(rows), length
                )
                out[rows] = _chain_ids(self.tables, toks)
        return out

    def match(
        self,
        tokens: ArrayLike,
        doc_starts: ArrayLike | None = None,
        lanes: int = matching.LANES,
        interpreted: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For every position, the longest f-gram ending there: (fgram_id or -1, length or 1).

        ``doc_starts``: positions where documents start (matches never cross them).
        ``lanes``: how many stretches of the input are matched side by side
        (any value gives the same result; it only changes the speed).
        ``interpreted``: the kernel's code run by the interpreter (`jit.interpreted`): a
        short context matched before the compiled kernel would have loaded.
        """
        toks = np.asarray(tokens)
        n = len(toks)
        if n and (toks.min() < 0 or toks.max() > MAX_TOKEN):
            raise ValueError(f"token ids must be in 0..{MAX_TOKEN}")
        marked = toks.astype(np.uint32)  # the top bit marks document starts
        starts = np.asarray(doc_starts if doc_starts is not None else [], dtype=np.int64)
        if len(starts):
            marked[starts] |= np.uint32(1 << 31)
        fid = np.empty(n, dtype=np.int64)
        mlen = np.empty(n, dtype=np.uint8)
        lanes = max(1, min(int(lanes), n))
        kernel = jit.interpreted(matching.match_longest) if interpreted else matching.match_longest
        with np.errstate(over="ignore"):  # the interpreter's warnings: the kernel wraps
            failed = kernel(marked, self.arrays, fid, mlen, lanes)
        if failed:
            raise damaged(self.where)
        return fid, mlen
