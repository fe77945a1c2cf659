"""`fgram verify TABLE`: every file of a published table as it was written (or of an
annotate or tokenize output: their manifests record their files the same way).

A refresh version's store objects carry their data's size and checksum in their
names (``<id>.<bytes>.<sum>.npy``), checked alike. A table's manifest names its files
with their size and sha256 (``checksums``); the
index (``index/index.json``) and the embeddings (``embeddings/embeddings.json``) name
theirs the same way (``files``). Sizes are checked always (a listing: seconds for any
table); ``deep`` also reads every byte against its sha256 and checks the index's
arrays for what its lookups rely on (every stored id below the number of f-grams,
every suffix link an id or -1), so a flipped bit anywhere is found.

Opening an index or a store checks sizes and shapes only (milliseconds), and their
lookups stop at damage they meet instead of reading out of bounds; `verify` is the
check for every byte.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import FgramError
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.keys import EMPTY
from fgram.pipeline.tables.versions import manifest_fingerprint, open_table

PARTS = (("index", "index.json"), ("embeddings", "embeddings.json"))


def _sha256(obj: Location) -> str:
    h = hashlib.sha256()
    with obj.fs.open_input_stream(obj.path) as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


class _Check:
    """What a verification found so far: files and bytes checked, the problems."""

    def __init__(self, deep: bool):
        self.deep = deep
        self.files = 0
        self.bytes = 0
        self.problems: list[str] = []
        self.unrecorded: list[str] = []

    def inside(self, folder: Location, rel: str) -> Location | None:
        """The file a name a data file gives, where it stays inside ``folder``; else None
        and a problem (the file it points at is never read)."""
        try:
            return folder.inside(rel)
        except FgramError as exc:
            self.problems.append(str(exc))
            return None

    def unnamed(self, loc: Location, sub: str, named: set[str]) -> None:
        """A table's own files that its manifest does not name (a manifest whose entries
        were changed to name others' files would leave them unchecked)."""
        folder = os.path.join(loc.path, sub)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if not name.startswith((".", "_")) and f"{sub}/{name}" not in named:
                self.problems.append(f"{loc.child(sub, name).uri}: not named by the manifest")

    def file(self, obj: Location, rec: dict[str, Any] | None) -> bool:
        """Check one file against its record (``bytes``, ``sha256``); whether it is whole."""
        info = obj.info()  # one stat: its type and size
        if info.type != pafs.FileType.File or info.size is None:
            self.problems.append(f"{obj.uri}: missing")
            return False
        self.files += 1
        self.bytes += info.size
        if rec is None or "bytes" not in rec:
            self.unrecorded.append(obj.uri)
        elif info.size != rec["bytes"]:
            self.problems.append(f"{obj.uri}: {info.size} bytes where {rec['bytes']} were written")
            return False
        if self.deep and rec is not None and "sha256" in rec and _sha256(obj) != rec["sha256"]:
            self.problems.append(f"{obj.uri}: its bytes changed since written (sha256 differs)")
            return False
        return True


def _part_files(meta: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = meta.get("files") or {}
    if not files and "sha256" in meta:  # embeddings written before files were recorded
        files = {"matrix.npy": {"object": "matrix.npy", "sha256": meta["sha256"]}}
    return files


def _index_arrays(folder: Location, meta: dict[str, Any], check: _Check) -> None:
    """The deep check of an index's arrays: what its lookups rely on."""
    import io

    total = int(meta["fgrams"])

    def load(name: str) -> np.ndarray:
        obj = folder.inside(_part_files(meta).get(name, {}).get("object", name))
        src = obj.path if obj.local else io.BytesIO(obj.read_bytes())
        arr: np.ndarray = np.load(src, mmap_mode="r" if obj.local else None, allow_pickle=False)
        return arr

    for L in range(2, int(meta["max_len"]) + 1):
        rows = load(f"table-{L}.npy")
        used = rows[:, 0] != EMPTY
        if int(used.sum()) != meta["lengths"][str(L)]["n"] or (rows[used, 1] >= total).any():
            check.problems.append(
                f"{folder.uri}/table-{L}.npy: its keys or ids are not those written"
            )
    suffix = load("suffix.npy")
    if len(suffix) and (suffix.min() < -1 or suffix.max() >= total):
        check.problems.append(f"{folder.uri}/suffix.npy: a suffix link out of range")


def _store_objects(version: Location, check: _Check) -> None:
    """A refresh version's store objects (``ROOT/store/objects``), each against the
    record its name carries: present, and (deep) its data's size and checksum."""
    if version.local:  # ROOT/current: a link to ROOT/versions/<id>
        real = os.path.dirname(os.path.dirname(os.path.realpath(version.path)))
        root = Location(real, real, version.options)
    else:
        root = version.parent().parent()
    folder = root.child("store").child("objects")
    for name in sorted(wf.npy_names(version.child("store.json").read_json())):
        obj, rec = check.inside(folder, name), wf.object_record(name)
        if obj is None:
            continue
        if not obj.is_file():
            check.problems.append(f"{obj.uri}: missing")
            continue
        check.files += 1
        check.bytes += int(obj.info().size or 0)
        if rec is None:
            check.unrecorded.append(obj.uri)
        elif check.deep and not wf.intact(obj, rec, legacy=True):
            check.problems.append(f"{obj.uri}: its bytes changed since written (checksum differs)")


def verify(
    path: str | Location, deep: bool = False, storage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Check a published table (a build output or a refresh root's current version):
    its files, its index's and its embeddings' (see the module). Returns ``{"table",
    "deep", "files", "bytes", "problems", "unrecorded"}``: ``problems`` one line each
    (empty: every file as written); ``unrecorded``: files whose writer recorded no size
    (an older fgram), checked for presence only."""
    loc, manifest = open_table(path, storage, kinds=None)  # tags and tokens too
    check = _Check(deep)
    sums = manifest.get("checksums") or {}
    named = set()
    for rel in manifest.get("files", []):
        obj = check.inside(loc, rel)
        if obj is not None:
            named.add(rel)
            check.file(obj, sums.get(rel))
    if loc.local and manifest.get("kind", "fgram-table") == "fgram-table":
        check.unnamed(loc, "fgrams", named)
    for part, meta_name in PARTS:
        folder = loc.child(part)
        if not folder.child(meta_name).exists():
            continue
        meta = folder.child(meta_name).read_json()
        if meta.get("table") != manifest_fingerprint(loc):
            check.problems.append(f"{folder.uri}: made for another f-gram table; rebuild it")
            continue
        objects = [
            (check.inside(folder, r.get("object", n)), r) for n, r in _part_files(meta).items()
        ]
        whole = [obj is not None and check.file(obj, r) for obj, r in objects]
        if deep and part == "index" and all(whole):
            _index_arrays(folder, meta, check)
    if loc.child("store.json").exists():  # a refresh version: the store objects it uses
        _store_objects(loc, check)
    return {
        "table": loc.uri,
        "deep": deep,
        "files": check.files,
        "bytes": check.bytes,
        "problems": check.problems,
        "unrecorded": check.unrecorded,
    }
