"""Versions of a refreshed f-gram table, side by side.

A refresh root holds ``versions/<id>/`` (each a finished `fgram build` output:
``fgrams/``, ``manifest.json``, ``_SUCCESS``) and ``current``, which names the
newest published version. A new version is written aside and published whole
(`publish.finish`), then ``current`` is switched in one step: a reader that
opens the root sees either the old table or the new one, never a mix.

- On a local or shared disk, ``current`` is a relative symlink, switched by the
  rename of a new one over it.
- On an object store, where nothing renames, ``current`` is a small object
  holding ``versions/<id>``, switched by one PUT (an object is replaced whole).

Version ids sort by time (``20261130T030512345Z-1a2b3c``: UTC to the millisecond),
each after the one before it (`new_version_id`). The functions take a
root as a local path (and then give local paths back) or a `storage.Location`.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from fgram.pipeline.errors import ConfigError, InputError, OutputError
from fgram.pipeline.io.publish import SUCCESS, as_location
from fgram.pipeline.io.storage import Location, is_remote

CURRENT = "current"
VERSIONS = "versions"


def new_version_id(after: str | None = None) -> str:
    """A new version's id: the UTC time to the millisecond and a random suffix, sorting
    after ``after`` (the newest version's id) even when made within its millisecond, or
    on a clock behind it: then its time is a millisecond past ``after``'s."""
    ms = int(time.time() * 1000)
    if after:
        ms = max(ms, _id_milliseconds(after) + 1)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(ms // 1000)) + f"{ms % 1000:03d}Z"
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def _id_milliseconds(vid: str) -> int:
    """The latest millisecond that an id (this format, or the older one to the second,
    ``20261130T030512Z-...``) may stand for."""
    import calendar

    stamp = vid.split("-", 1)[0]
    seconds = calendar.timegm(time.strptime(stamp[:15], "%Y%m%dT%H%M%S"))
    return seconds * 1000 + (int(stamp[15:18]) if len(stamp) == 19 else 999)


def is_finished(loc: Location) -> bool:
    """Whether ``loc`` holds a finished output."""
    if loc.local:
        return os.path.exists(os.path.join(loc.path, "_SUCCESS")) and os.path.exists(
            os.path.join(loc.path, "manifest.json")
        )
    return loc.child("_SUCCESS").exists() and loc.child("manifest.json").exists()


def list_versions(root: str | Location) -> list[str]:
    """Finished version ids, oldest first."""
    folder = as_location(root).child(VERSIONS)
    return sorted(
        v for v in folder.names() if not v.startswith(".") and is_finished(folder.child(v))
    )


def current(root: str | Location) -> str | None:
    """The id of the published version, or None."""
    loc = as_location(root)
    link = loc.child(CURRENT)
    if loc.local:
        if not os.path.islink(link.path):
            return None
        return os.path.basename(os.readlink(link.path).rstrip("/"))
    if not link.is_file():
        return None
    return link.read_bytes().decode().strip().rstrip("/").rsplit("/", 1)[-1]


def version_path(root: str | Location, vid: str) -> Location:
    """The folder of version ``vid``."""
    return as_location(root).child(VERSIONS, vid)


def check_root(root: str | Location, storage: dict[str, Any] | None = None) -> Location:
    """A refresh root: absent, empty, or already one (never a plain build output)."""
    loc = as_location(root, storage)
    if is_finished(loc):
        raise OutputError(
            f"{loc.uri}: is a plain `fgram build` output; refresh needs a folder "
            f"of its own (it keeps versions/ and current there)"
        )
    if loc.local and os.path.exists(loc.path) and not os.path.isdir(loc.path):
        raise OutputError(f"{loc.path}: exists and is not a directory")
    names = set(loc.names())
    extra = names - {VERSIONS, CURRENT, "store"}
    if extra and VERSIONS not in names:
        raise OutputError(
            f"{loc.uri}: not empty and not a refresh folder (found {', '.join(sorted(extra)[:3])})"
        )
    if loc.local:
        for sub in (VERSIONS, "store", os.path.join("store", "objects")):
            inside = os.path.join(loc.path, sub)
            if os.path.islink(inside):  # a refresh writes and deletes only in its folder
                raise OutputError(
                    f"{inside}: a link (to {os.readlink(inside)}); a refresh folder's "
                    f"{sub} must be a folder of its own (refresh deletes files there)"
                )
        os.makedirs(os.path.join(loc.path, VERSIONS), exist_ok=True)
    return loc


def switch_current(root: str | Location, vid: str) -> None:
    """Point ``current`` at version ``vid`` in one step: locally the rename of a new
    symlink, on an object store one PUT of the pointer object."""
    loc = as_location(root)
    if not is_finished(loc.child(VERSIONS, vid)):
        raise OutputError(f"{loc.child(VERSIONS, vid).uri}: not a finished version")
    if not loc.local:
        loc.child(CURRENT).write_bytes(f"{VERSIONS}/{vid}\n".encode())
        return
    tmp = os.path.join(loc.path, f".{CURRENT}-{uuid.uuid4().hex[:8]}")
    os.symlink(os.path.join(VERSIONS, vid), tmp)
    os.replace(tmp, os.path.join(loc.path, CURRENT))


def _delete(loc: Location) -> None:
    """Delete a folder; on an object store its `_SUCCESS` first, so that a listing that
    races the deletion never counts a half-deleted version as finished."""
    if not loc.local:
        loc.child(SUCCESS).remove()
    loc.remove_tree()


def clear_leftovers(root: str | Location) -> list[str]:
    """Remove what a killed refresh left in versions/ (its staging folder, a version
    half deleted): hidden entries, never a finished version. Call with the lock held."""
    folder = as_location(root).child(VERSIONS)
    gone = [n for n in folder.names() if n.startswith(".")]
    for name in gone:
        entry = folder.child(name)
        entry.remove() if entry.is_file() else entry.remove_tree()
    return gone


def check_keep(keep: int) -> int:
    if keep < 1:
        raise ConfigError(f"--keep must be >= 1, got {keep}")
    return keep


def prune(root: str | Location, keep: int) -> list[str]:
    """Delete the oldest finished versions beyond the newest ``keep`` (never the current
    one). Returns the ids deleted."""
    check_keep(keep)
    loc = as_location(root)
    cur = current(loc)
    old = [v for v in list_versions(loc) if v != cur]
    survivors = 1 if cur else 0
    doomed = old[: max(len(old) - (keep - survivors), 0)]
    for vid in doomed:
        if loc.local:  # renamed first: gone from listings at once
            aside = os.path.join(loc.path, VERSIONS, f".{vid}.deleting")
            os.rename(os.path.join(loc.path, VERSIONS, vid), aside)
            _delete(loc.child(VERSIONS, f".{vid}.deleting"))
        else:
            _delete(loc.child(VERSIONS, vid))
    return doomed


def resolve_table(path: str | Location, storage: dict[str, Any] | None = None) -> Location:
    """A build output, or a refresh root (its current version): local ``current`` is a
    symlink, on an object store an object holding the version's path."""
    loc = as_location(path, storage)
    if is_finished(loc):
        return loc
    cur = loc.child(CURRENT)
    if loc.local:  # the link read once: every file then comes from that one version
        if not os.path.islink(cur.path):
            return loc
        return loc.inside(os.readlink(cur.path))  # versions/<id>; never a path out
    if cur.is_file():
        return loc.child(cur.read_bytes().decode().strip())
    return loc


def table_part(
    table: str | Location, part: str, overwrite: bool, storage: dict[str, Any] | None = None
) -> Location:
    """Where TABLE/<part> (its index, its embeddings) goes, in a refresh folder's current
    version: like every writer, an existing one is replaced only with ``overwrite``."""
    where = resolve_table(table, storage).child(part)
    if not overwrite and where.exists():
        shown = where.uri if is_remote(where.uri) else os.path.abspath(where.path)
        raise OutputError(f"{shown}: exists; pass --overwrite to replace it")
    return where


def manifest_fingerprint(out: Location) -> str:
    """A short digest of an output's manifest: what its index, tags and embeddings name."""
    import hashlib

    return hashlib.sha256(out.child("manifest.json").read_bytes()).hexdigest()[:16]


TABLE_KIND = "fgram-table"
OTHER_OUTPUTS = {  # what a command that reads a table says of fgram's other outputs
    "fgram-tokens": "token shards (an `fgram tokenize` output), not an f-gram table: "
    "`fgram build TABLE SHARDS` makes one of them",
    "fgram-tags": "tags (an `fgram annotate` output), not an f-gram table: `fgram report` "
    "and `fgram verify` read them, `fgram show` the table they name",
}


def open_table(
    path: str | Location,
    storage: dict[str, Any] | None = None,
    kinds: tuple[str, ...] | None = (TABLE_KIND,),
) -> tuple[Location, dict[str, Any]]:
    """(location, manifest) of the finished table at ``path`` (see `resolve_table`);
    ``kinds``: the outputs accepted (None: any of fgram's; an old table's manifest names
    no kind). Another output, or nothing there, is one line saying which."""
    loc = resolve_table(path, storage)
    if not is_finished(loc):
        if not loc.exists():
            raise InputError(loc.uri, "no such file or folder")
        raise InputError(loc.uri, "not a finished fgram table (no _SUCCESS or manifest.json)")
    manifest: dict[str, Any] = loc.child("manifest.json").read_json()
    kind = manifest.get("kind", TABLE_KIND)
    if kinds is not None and kind not in kinds:
        raise InputError(loc.uri, OTHER_OUTPUTS.get(kind, f"a {kind} output, not an f-gram table"))
    return loc, manifest


def _named_files(loc: Location, manifest: dict[str, Any]) -> list[str]:
    """The table's Parquet files its manifest names (an object store may hold another
    generation's beside them), in order; [] for outputs written before manifests named
    their files."""
    for f in manifest.get("files", []):
        loc.inside(f)  # a name that leaves the table is refused, never read
    return [f for f in manifest.get("files", []) if f.startswith("fgrams/")]


def table_files(loc: Location, manifest: dict[str, Any]) -> list[Location]:
    """The table's Parquet files in order: exactly those its manifest names, or, for
    outputs written before manifests named their files, those of ``fgrams/``."""
    named = _named_files(loc, manifest)
    if named:
        return [loc.child(f) for f in named]
    folder = loc.child("fgrams")
    return [folder.child(f) for f in folder.files() if f.endswith(".parquet")]


def table_head(loc: Location, manifest: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The table's first ``n`` rows (its most frequent f-grams), read file by file with
    Parquet's reader alone (no dataset layer: a command that lists a few rows starts
    fast)."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for file in table_files(loc, manifest):
        if len(rows) >= n:
            break
        try:
            with file.fs.open_input_file(file.path) as f:
                for batch in pq.ParquetFile(f).iter_batches(batch_size=max(n, 1)):
                    rows += batch.slice(0, n - len(rows)).to_pylist()
                    if len(rows) >= n:
                        break
        except OSError as exc:
            raise InputError(file.uri, f"cannot read its rows ({exc})") from None
    return rows


def table_dataset(loc: Location, manifest: dict[str, Any]) -> Any:
    """The table's Parquet dataset: exactly the files its manifest names (an object
    store may hold another generation's beside them), or, for outputs written before
    manifests named their files, the ``fgrams/`` folder."""
    files = _named_files(loc, manifest)
    return loc.dataset(files) if files else loc.child("fgrams").dataset()
