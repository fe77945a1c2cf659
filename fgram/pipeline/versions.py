"""Versions of a refreshed f-gram table, side by side.

A refresh root holds ``versions/<id>/`` (each a finished `fgram build` output:
``fgrams/``, ``manifest.json``, ``_SUCCESS``) and ``current``, a relative
symlink to the newest published version. A new version is built aside (its
own staging, then a rename), then ``current`` is switched with one atomic
rename of a new symlink over the old one: a reader that opens
``OUT/current`` sees either the old table or the new one, never a mix.
Version ids sort by time (``20261130T030512Z-1a2b3c``).
"""
from __future__ import annotations

import os
import shutil
import time
import uuid

from .errors import ConfigError, InputError, OutputError
from .publish import as_location
from .storage import Location, is_remote

CURRENT = "current"
VERSIONS = "versions"


def new_version_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def is_finished(path) -> bool:
    """Whether ``path`` (a local path, a URI or a `Location`) holds a finished output."""
    if isinstance(path, str) and not is_remote(path):
        return os.path.exists(os.path.join(path, "_SUCCESS")) and \
            os.path.exists(os.path.join(path, "manifest.json"))
    loc = as_location(path)
    return loc.child("_SUCCESS").exists() and loc.child("manifest.json").exists()


def list_versions(root: str) -> list[str]:
    """Finished version ids, oldest first."""
    folder = os.path.join(root, VERSIONS)
    if not os.path.isdir(folder):
        return []
    return sorted(v for v in os.listdir(folder)
                  if not v.startswith(".") and is_finished(os.path.join(folder, v)))


def current(root: str) -> str | None:
    """The id of the published version, or None."""
    link = os.path.join(root, CURRENT)
    if not os.path.islink(link):
        return None
    return os.path.basename(os.readlink(link).rstrip("/"))


def version_path(root: str, vid: str) -> str:
    return os.path.join(root, VERSIONS, vid)


def check_root(root: str) -> str:
    """A refresh root: absent, empty, or already one (never a plain build output)."""
    root = os.path.abspath(root)
    if os.path.exists(root):
        if not os.path.isdir(root):
            raise OutputError(f"{root}: exists and is not a directory")
        if is_finished(root):
            raise OutputError(f"{root}: is a plain `fgram build` output; refresh needs a folder "
                              f"of its own (it keeps versions/ and current there)")
        extra = set(os.listdir(root)) - {VERSIONS, CURRENT}
        if extra and not os.path.isdir(os.path.join(root, VERSIONS)):
            raise OutputError(f"{root}: not empty and not a refresh folder "
                              f"(found {', '.join(sorted(extra)[:3])})")
    os.makedirs(os.path.join(root, VERSIONS), exist_ok=True)
    return root


def switch_current(root: str, vid: str) -> None:
    """Point ``current`` at version ``vid`` atomically (rename of a new symlink)."""
    if not is_finished(version_path(root, vid)):
        raise OutputError(f"{version_path(root, vid)}: not a finished version")
    tmp = os.path.join(root, f".{CURRENT}-{uuid.uuid4().hex[:8]}")
    os.symlink(os.path.join(VERSIONS, vid), tmp)
    os.replace(tmp, os.path.join(root, CURRENT))


def clear_leftovers(root: str) -> list[str]:
    """Remove what a killed refresh left in versions/ (its staging folder, a version
    half deleted): hidden entries, never a finished version. Call with the lock held."""
    folder = os.path.join(root, VERSIONS)
    gone = [n for n in os.listdir(folder) if n.startswith(".")] if os.path.isdir(folder) else []
    for name in gone:
        path = os.path.join(folder, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return gone


def check_keep(keep: int) -> int:
    if keep < 1:
        raise ConfigError(f"--keep must be >= 1, got {keep}")
    return keep


def prune(root: str, keep: int) -> list[str]:
    """Delete the oldest finished versions beyond the newest ``keep`` (never the current
    one). Returns the ids deleted."""
    check_keep(keep)
    cur = current(root)
    old = [v for v in list_versions(root) if v != cur]
    survivors = (1 if cur else 0)
    doomed = old[:max(len(old) - (keep - survivors), 0)]
    for vid in doomed:
        aside = os.path.join(root, VERSIONS, f".{vid}.deleting")
        os.rename(version_path(root, vid), aside)      # gone from listings at once
        shutil.rmtree(aside, ignore_errors=True)
    return doomed


def resolve_table(path, storage: dict | None = None) -> Location:
    """A build output, or a refresh root (its current version): local ``current`` is a
    symlink, on an object store an object holding the version's path."""
    loc = as_location(path, storage)
    if is_finished(loc):
        return loc
    cur = loc.child(CURRENT)
    if loc.local:
        return cur if os.path.islink(cur.path) else loc
    if cur.is_file():
        return loc.child(cur.read_bytes().decode().strip())
    return loc


def open_table(path, storage: dict | None = None) -> tuple[Location, dict]:
    """(location, manifest) of the finished table at ``path`` (see `resolve_table`)."""
    loc = resolve_table(path, storage)
    if not is_finished(loc):
        raise InputError(loc.uri, "not a finished fgram table (no _SUCCESS or manifest.json)")
    return loc, loc.child("manifest.json").read_json()


def table_dataset(loc: Location, manifest: dict):
    """The table's Parquet dataset: exactly the files its manifest names (an object
    store may hold another generation's beside them), or, for outputs written before
    manifests named their files, the ``fgrams/`` folder."""
    files = [f for f in manifest.get("files", []) if f.startswith("fgrams/")]
    return loc.dataset(files) if files else loc.child("fgrams").dataset()
