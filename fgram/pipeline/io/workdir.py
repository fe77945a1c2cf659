"""Intermediate files of a build: one folder per pass, one completed unit per file.

Every file is written aside and renamed into place (on an object store: one PUT, which
appears whole or not at all), so a retried or speculative task never leaves a
half-written file for a reader. The work folder is a `storage.Location`: on this
machine's disks (a local or shared disk: the fast path, memory maps) or on an object
store, which every executor of a cluster reaches.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import uuid
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from fgram.pipeline.io.failures import aside
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.scratch import Scratch


def on_store(path: Location) -> bool:
    """Whether a place is on an object store (not a path of this machine)."""
    return not path.local


def local_path(path: Location) -> str:
    """The path on this machine of a place that is not on an object store."""
    assert path.local, path.uri
    return path.path


def is_link(path: Location) -> bool:
    """Whether a local place is a symbolic link (an object store has none)."""
    return not on_store(path) and os.path.islink(local_path(path))


HASH = "xxh3"  # the records' key: an older record (a word sum) is never taken as intact


def content_hash(arr: np.ndarray) -> int:
    """XXH3-64 of an array's bytes (about 20 GB/s here): any changed, swapped or moved
    byte changes it, and no change compensates another (unlike a sum of words, which a
    swap of two words or +d on one and -d on another leaves equal)."""
    import xxhash

    b = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return int(xxhash.xxh3_64_intdigest(b.data))


def save_array(path: Location, arr: np.ndarray) -> dict[str, int]:
    """Write ``arr`` (aside, then renamed); returns its record, ``{"bytes", "xxh3"}`` of
    its data (`content_hash`), for a completion marker to hold and `intact` to check."""
    arr = np.ascontiguousarray(arr)
    record = {"bytes": int(arr.nbytes), HASH: content_hash(arr)}
    if on_store(path):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        path.write_bytes(buf.getbuffer())
        return record
    with aside(local_path(path)) as tmp, open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)
    return record


def object_name(record: dict[str, int]) -> str:
    """A refresh store's object's name for `save_array`'s record:
    ``<id>.<bytes>.x<xxh3 hex>.npy`` (`object_record` reads it back)."""
    return f"{uuid.uuid4().hex}.{record['bytes']}.x{record[HASH]:016x}.npy"


def object_record(name: str) -> dict[str, int] | None:
    """The record a store object's name carries (`object_name`): ``{"bytes", "xxh3"}``,
    or an older fgram's ``<id>.<bytes>.<hex>.npy``, a sum of 64-bit words
    (``{"bytes", "sum"}``, checked as it was written); None for a name without one."""
    parts = name.split(".")
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    digest = parts[2]
    if digest.startswith("x"):
        return {"bytes": int(parts[1]), HASH: int(digest[1:], 16)}
    return {"bytes": int(parts[1]), "sum": int(digest, 16)}


def matches(arr: np.ndarray, record: dict[str, int], legacy: bool = False) -> bool:
    """Whether ``arr`` holds what its record says: its size and its XXH3. ``legacy``: an
    older store object's name, a word sum, is checked as it was written (a work file's
    older record is not: its unit is counted again)."""
    if int(arr.nbytes) != record["bytes"]:
        return False
    if HASH in record:
        return content_hash(arr) == record[HASH]
    return legacy and "sum" in record and _word_sum(arr) == record["sum"]


def _word_sum(arr: np.ndarray) -> int:
    """An older fgram's store-object checksum: the bytes' sum as little-endian 64-bit
    words, mod 2^64 (read only, for objects named by it)."""
    b = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    whole = len(b) // 8 * 8
    total = int(b[:whole].view("<u8").sum(dtype=np.uint64)) if whole else 0
    return (total + int.from_bytes(b[whole:].tobytes(), "little")) % (1 << 64)


def npy_names(doc: Any) -> set[str]:
    """Every ``*.npy`` string in a JSON document (the objects a store.json uses, whatever
    its format)."""
    if isinstance(doc, dict):
        return set().union(*(npy_names(v) for v in doc.values())) if doc else set()
    if isinstance(doc, list):
        return set().union(*(npy_names(v) for v in doc)) if doc else set()
    return {doc} if isinstance(doc, str) and doc.endswith(".npy") else set()


def intact(path: Location, record: dict[str, int], legacy: bool = False) -> bool:
    """Whether the array file at ``path`` holds what `save_array` wrote (its record;
    ``legacy``: as `matches`)."""
    try:
        arr = load_array(path)
    except (OSError, ValueError, EOFError, SyntaxError):  # gone, cut short, a bad header
        return False
    return matches(arr, record, legacy)


def read_range(path: Location, start: int, stop: int) -> np.ndarray:
    """Items [start, stop) of a saved 1-D array, read into memory: no file stays open (a
    memory map holds a file descriptor for as long as any view of it lives, and a task
    that keeps a slice of each of thousands of units would run out of them)."""
    if on_store(path):
        return np.array(load_array(path)[start:stop])
    mapped = np.load(local_path(path), mmap_mode="r", allow_pickle=False)
    dtype, offset = mapped.dtype, int(mapped.offset)
    del mapped  # its descriptor closes here
    count = max(stop - start, 0)
    out: np.ndarray = np.fromfile(
        local_path(path), dtype=dtype, count=count, offset=offset + start * dtype.itemsize
    )
    if len(out) != count:
        raise EOFError(f"{local_path(path)}: {len(out)} of {count} items")
    return out


def load_array(path: Location, mmap: bool = True) -> np.ndarray:
    """A local file memory-mapped (``mmap``) or read; an object read whole."""
    if on_store(path):
        arr: np.ndarray = np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
        return arr
    arr = np.load(local_path(path), mmap_mode="r" if mmap else None, allow_pickle=False)
    return arr


def read_into(path: Location, scratch: Scratch, name: str) -> np.ndarray:
    """A 1-d array file read into ``scratch``'s buffer ``name`` (a `scratch.Scratch`):
    a worker reading one such file per unit reuses the same pages (a fresh
    array's first touch costs more than the copy)."""
    if on_store(path):
        arr = load_array(path)
        out = scratch.get(name, len(arr), arr.dtype)
        out[:] = arr
        return out
    local = local_path(path)
    with open(local, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):  # np.save writes these: anything else, plainly
            return load_array(path, mmap=False)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(f)
        if len(shape) != 1 or dtype.hasobject:
            raise ValueError(f"{local}: not a 1-d array of numbers")
        into = scratch.get(name, shape[0], dtype)
        if f.readinto(into.data.cast("B")) != into.nbytes:
            raise ValueError(f"{local}: truncated")
    return into


def concat_arrays(
    dest: Location,
    parts: list[Location],
    dtype: DTypeLike,
    shape: tuple[int, ...],
    header: bool = True,
) -> tuple[str, int]:
    """One ``.npy`` object at ``dest`` of ``dtype`` and ``shape``: a header (``header``;
    else a raw file), then the arrays of ``parts`` (files or objects, read one at a
    time), in order, streamed as one upload (an object appears only when complete).
    Returns its sha256 and size."""
    import hashlib

    from fgram.pipeline.errors import FgramError

    dtype = np.dtype(dtype)
    head = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        head,
        {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": tuple(shape),
        },
    )
    digest, size, rows = hashlib.sha256(), 0, 0
    try:
        with dest.fs.open_output_stream(dest.path) as f:

            def put(data: bytes) -> None:
                nonlocal size
                digest.update(data)
                f.write(data)
                size += len(data)

            if header:
                put(head.getvalue())
            for part in parts:
                arr = load_array(part)
                if arr.shape[1:] != tuple(shape[1:]):
                    raise FgramError(
                        f"{part.uri}: rows of shape {arr.shape[1:]}, expected {tuple(shape[1:])}"
                    )
                rows += len(arr)
                put(np.ascontiguousarray(arr, dtype=dtype).tobytes())
            if rows != shape[0]:
                raise FgramError(f"{dest.uri}: {rows} rows in the parts, expected {shape[0]}")
    except FgramError:
        dest.remove()
        raise
    except Exception as exc:  # noqa: BLE001 - one line, naming the object
        raise dest._fail(exc) from None
    return digest.hexdigest(), size


def remove_partial(folder: Location) -> None:
    """Remove the files half-written under a local folder (``*.tmp``, the names `aside`
    writes through) by tasks that a failure stopped before they could: their work is
    kept for a resume, never their pieces. An object store's uploads appear whole."""
    if on_store(folder):
        return
    for root, _, files in os.walk(local_path(folder)):
        for name in files:
            if name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(root, name))


def save_json(path: Location, obj: Any, durable: bool = True) -> None:
    """Write JSON atomically (aside, then rename); ``durable`` also fsyncs it first."""
    if on_store(path):
        path.write_json(obj)
        return
    with aside(local_path(path)) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
        if durable:
            f.flush()
            os.fsync(f.fileno())


def load_json(path: Location) -> Any:
    if on_store(path):
        return path.read_json()
    with open(local_path(path)) as f:
        return json.load(f)


def claim_staging(staging: Location, fingerprint: Any, resume: bool, what: str = "run") -> bool:
    """Make a run's staging folder (``_work/run.json`` holds the run's ``fingerprint``),
    or keep an unfinished run's when ``resume`` and it is this very run (same options,
    same inputs); returns whether it resumes. ``--resume`` onto another run's work is
    refused; leftovers without it are removed, and said to be (hours of work may go)."""
    from fgram.pipeline.errors import OutputError

    record = staging.child("_work", "run.json")
    if exists(record) or names(staging):
        old = load_json(record) if exists(record) else None
        if resume and old == fingerprint:
            return True
        if resume and old is not None:
            other = "inputs" if old.get("inputs") != fingerprint.get("inputs") else "options"
            raise OutputError(
                f"{staging.uri}: cannot resume: the unfinished {what} there had other "
                f"{other}; rerun without --resume to start over"
            )
        if old is not None:
            sys.stderr.write(
                f"fgram: removing an unfinished {what}'s work in "
                f"{staging.uri} (--resume would continue it)\n"
            )
        staging.remove_tree()
    make_dirs(staging.child("_work"))
    save_json(record, fingerprint)
    return False


def exists(path: Location) -> bool:
    return path.exists() if on_store(path) else os.path.exists(local_path(path))


def remove(path: Location) -> None:
    """Delete a file; no error if it is gone (or, locally, not ours to remove)."""
    if on_store(path):
        path.remove()
        return
    with contextlib.suppress(OSError):
        os.remove(local_path(path))


def names(folder: Location) -> list[str]:
    """The names right in ``folder`` ([] if it is absent): locally its entries, on an
    object store the objects right below it."""
    if folder.local:
        return os.listdir(folder.path) if os.path.isdir(folder.path) else []
    return [n for n in folder.files() if "/" not in n]


def make_dirs(folder: Location) -> None:
    """Make a local folder (an object store has none to make)."""
    if folder.local:
        os.makedirs(folder.path, exist_ok=True)


class WorkDir:
    """Names of a build's intermediate files (below a `Location`)."""

    def __init__(self, root: Location) -> None:
        self.root = root

    def pass_dir(self, k: int) -> Location:
        path = self.root.child(f"pass{k}")
        make_dirs(path)
        return path

    def unit(self, k: int, u: int, what: str) -> Location:
        return self.pass_dir(k).child(f"unit-{u:06d}.{what}.npy")

    def merged(self, k: int, p: int, what: str) -> Location:
        return self.pass_dir(k).child(f"merged-{p:05d}.{what}.npy")

    def frequent(self, k: int, p: int, what: str) -> Location:
        return self.pass_dir(k).child(f"frequent-{p:05d}.{what}.npy")

    def decoded(self, k: int, p: int, what: str) -> Location:
        return self.pass_dir(k).child(f"decoded-{p:05d}.{what}.npy")

    def answers(self, k: int, p: int, what: str) -> Location:
        return self.pass_dir(k).child(f"answers-{p:05d}.{what}.npy")


class Sweeper:
    """Removes consumed intermediates in a background thread, one batch at a time.

    Unlinking frees every block of a file: a pass's consumed files (GBs at 500M
    tokens) kept the driver busy between passes while the cores idled.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def sweep(self, paths: list[Location]) -> None:
        self.wait()
        self._thread = threading.Thread(target=_remove_files, args=(paths,), daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _remove_files(paths: list[Location]) -> None:
    for path in paths:
        with contextlib.suppress(Exception):  # noqa: BLE001 - gone already, or not ours: the staging folder goes anyway
            remove(path)
