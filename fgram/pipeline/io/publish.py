"""Atomic publishing: build aside, then rename into place; `_SUCCESS` last."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

from fgram.pipeline.errors import LockedError, OutputError
from fgram.pipeline.io.cache import cache_dir
from fgram.pipeline.io.lease import confirm_held
from fgram.pipeline.io.storage import Location, check_bucket, json_bytes, locate


def as_location(out: str | Location, storage: dict[str, Any] | None = None) -> Location:
    """A place a caller names (a path, a URI, or a `Location` already): the one
    conversion at the library's doors; inside, every place is a `Location`."""
    return out if isinstance(out, Location) else locate(str(out), storage)


def here(path: str) -> Location:
    """A folder of this machine."""
    return Location(path, path)


def check_output(
    out: str | Location,
    overwrite: bool,
    storage: dict[str, Any] | None = None,
    resume: bool = False,
) -> Location:
    """Where an output goes, checked before any work: a local folder that may be made
    and written, or an object-store prefix whose bucket exists and answers. Without
    ``overwrite`` it must not exist yet (an object-store prefix a run of ours left
    unfinished may be continued with ``resume``)."""
    loc = as_location(out, storage)
    if not loc.local:
        check_bucket(loc)
        if loc.exists() and not overwrite and not (resume and not loc.child(SUCCESS).exists()):
            raise OutputError(f"{loc.uri}: output exists; pass --overwrite to replace it")
        if overwrite and foreign_output(loc):
            raise OutputError(f"{loc.uri}: {_NOT_OURS}")
        return loc
    path = loc.path
    if os.path.exists(path) and not overwrite:
        raise OutputError(f"{path}: output exists; pass --overwrite to replace it")
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{path}: exists and is not a directory")
    if overwrite and foreign_output(loc):
        raise OutputError(f"{path}: {_NOT_OURS}")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{parent}: cannot create output folder ({exc.strerror})") from None
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{parent}: not writable")
    return loc


SUCCESS = "_SUCCESS"
MANIFEST = "manifest.json"
_NOT_OURS = (
    "exists and is not an fgram output (no manifest.json): --overwrite replaces only "
    "those; remove it yourself or choose another name"
)


def foreign_output(out: str | Location) -> bool:
    """Whether ``out`` (a path or a `Location`) is something an fgram writer must not
    replace, even with --overwrite: a file, or a folder that is neither empty nor an
    fgram output (a manifest.json or _SUCCESS in it): a corpus, say, given in the
    output's place."""
    loc = as_location(out)
    if loc.local:
        if not os.path.exists(loc.path):
            return False
        if not os.path.isdir(loc.path):
            return True
        return bool(os.listdir(loc.path)) and not any(
            os.path.exists(os.path.join(loc.path, n)) for n in (MANIFEST, SUCCESS)
        )
    return loc.exists() and not any(loc.child(n).exists() for n in (MANIFEST, SUCCESS))


def _beside(out: Location, what: str) -> str:
    """A hidden local sibling of ``out``: ``.<name>.fgram-<what>``; for an output on an
    object store, a folder of the local cache named after its URI (the run's work
    stays on this machine; only the finished output is uploaded)."""
    if not out.local:
        import hashlib

        digest = hashlib.sha256(out.uri.encode()).hexdigest()[:16]
        return os.path.join(cache_dir("remote-runs"), f".{out.name}-{digest}.fgram-{what}")
    return _hidden(out.path, what)


def _hidden(path: str, what: str) -> str:
    """``.<name>.fgram-<what>`` beside a local ``path``."""
    parent, name = os.path.split(path)
    return os.path.join(parent, f".{name}.fgram-{what}")


def staging_path(out: Location) -> str:
    """The one (local) staging folder of an output: a crashed run's work stays there for
    --resume."""
    return _beside(out, "staging")


def lock_path(out: Location) -> str:
    return _beside(out, "lock")


def staging_for(
    out: Location, runs_here: bool, unique: bool = False, what: str = "staging"
) -> Location:
    """Where a run stages ``out`` before publishing it. On this machine when ``out`` is
    local or the run's tasks run here (`staging_path`: beside a local output, the local
    cache for one on an object store); else on the store beside ``out``, a hidden
    `Location` every executor reaches (a cluster without a shared mount). ``unique``: a
    name of its own (the run makes the folder), not the one a killed run left for
    --resume. ``what``: another folder of the run's, named so (``text``: a build's
    tokens)."""
    what = f"{what}-{uuid.uuid4().hex[:12]}" if unique else what
    if not (out.local or runs_here):
        return out.sibling(f".{out.name}.fgram-{what}")
    return here(_beside(out, what))


def run_folder(staging: Location, what: str) -> Location:
    """Another folder of a run, beside its staging folder (``.X.fgram-staging``):
    ``.X.fgram-<what>`` (``text``: a build's tokens)."""
    suffix = "fgram-staging"
    assert staging.name.endswith(suffix)
    return staging.sibling(staging.name[: -len(suffix)] + f"fgram-{what}")


def publish(staging: str, out: str) -> None:
    """Move a finished local staging folder to local `out`, replacing an older output
    atomically (two renames).

    The caller writes `_SUCCESS` into staging before this; readers that see
    `out` see either the old complete output or the new complete one. The staging
    folder's ``_work`` (what --resume continues from) goes only now, so a failure
    anywhere before (the manifest on a full disk, the copy) can still be resumed.
    """
    out = os.path.abspath(out)
    src = staging
    if os.stat(staging).st_dev != os.stat(os.path.dirname(out)).st_dev:
        src = _copied_beside(staging, out)  # a rename cannot cross filesystems
    else:  # the run's work goes last, at the rename: a failure before it keeps it
        shutil.rmtree(os.path.join(staging, "_work"), ignore_errors=True)
    if os.path.exists(out):
        old = _hidden(out, f"old-{uuid.uuid4().hex[:12]}")
        os.rename(out, old)
        os.rename(src, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(src, out)
    if src != staging:  # published: the work folder elsewhere goes
        shutil.rmtree(staging, ignore_errors=True)


def _copied_beside(staging: str, out: str) -> str:
    """A staging folder on another filesystem than ``out`` (a --work-dir elsewhere)
    copied beside ``out``, its work files left out, so that the publishing rename stays
    one atomic step on the output's filesystem."""
    from fgram.pipeline.io.failures import writing

    copy = _hidden(out, f"copy-{uuid.uuid4().hex[:12]}")
    try:
        with writing(copy):
            shutil.copytree(staging, copy, ignore=lambda d, _: ["_work"] if d == staging else [])
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return copy


def data_files(staging: Location) -> list[str]:
    """The files of a finished staging folder (relative, sorted), markers and work
    files excluded."""
    if not staging.local:
        found = staging.files()
    else:
        found = []
        for folder, dirs, files in os.walk(staging.path):
            dirs[:] = [d for d in dirs if d != "_work"]  # not walked: nothing there is data
            rel = os.path.relpath(folder, staging.path)
            found += [name if rel == "." else f"{rel}/{name}" for name in files]
    return sorted(f for f in found if f not in (MANIFEST, SUCCESS) and not f.startswith("_work/"))


def generation_name(rel: str, gen: str) -> str:
    """``fgrams/part-00000.parquet`` -> ``fgrams/part-00000-<gen>.parquet``: the name a file
    of generation ``gen`` has on an object store, beside an older generation's."""
    head, dot, ext = rel.rpartition(".")
    return f"{head}-{gen}.{ext}" if dot and "/" not in ext else f"{rel}-{gen}"


def finish(
    staging: Location,
    out: Location,
    manifest: dict[str, Any],
    new_folder: bool = False,
    checksums: bool = False,
) -> None:
    """Publish the finished staging folder (on this machine, or on the same object
    store as ``out``) as ``out`` with ``manifest``, which names every file of the
    output (``files``). ``new_folder``: ``out`` is a folder no reader knows yet (a
    refresh's new version), so on an object store its files keep their own names.

    Local ``out``: manifest, `_SUCCESS`, then two renames (`publish`). On an object
    store, where nothing renames: the data files under names of their own generation
    (an older output stays whole beside them), then ``manifest.json`` (the switch: a
    reader that reads it finds every file it names), then `_SUCCESS`, then the older
    generation's objects are deleted.

    ``checksums``: the manifest also holds each file's size and sha256 (``checksums``,
    by the names in ``files``; `fgram verify` checks them), from a staging folder on
    this machine (one on the store gives sizes only)."""
    files = data_files(staging)
    sums = _checksums(staging, files) if checksums else None
    if out.local:
        from fgram.pipeline.io.workdir import save_json

        assert staging.local, staging.uri  # a local output is staged on this machine
        manifest["files"] = files
        if sums is not None:
            manifest["checksums"] = sums
        save_json(staging.child(MANIFEST), manifest)
        with open(os.path.join(staging.path, SUCCESS), "w"):
            pass
        publish(staging.path, out.path)
        return
    gen = uuid.uuid4().hex[:12]
    names = {rel: rel if new_folder else generation_name(rel, gen) for rel in files}
    manifest["files"] = sorted(names.values())
    manifest["generation"] = gen
    if sums is not None:
        manifest["checksums"] = {names[rel]: rec for rel, rec in sums.items()}
    commit_generation(
        out,
        {name: staging.child(rel) for rel, name in names.items()},
        [(MANIFEST, json_bytes(manifest)), (SUCCESS, gen.encode())],
    )
    if staging.local:
        discard(staging.path)
    else:
        staging.remove_tree()


def _checksums(staging: Location, files: list[str]) -> dict[str, dict[str, Any]]:
    """Each data file's ``bytes`` and (staged on this machine) ``sha256``."""
    from fgram.pipeline.io.cache import file_record

    if not staging.local:
        return {rel: {"bytes": staging.child(rel).info().size} for rel in files}
    return {rel: file_record(os.path.join(staging.path, rel)) for rel in files}


def commit_generation(
    dest: Location,
    files: dict[str, Location],
    markers: list[tuple[str, bytes]],
    written: tuple[str, ...] = (),
) -> None:
    """The commit protocol of an object-store folder, where nothing renames: upload
    ``files`` (name below ``dest`` -> a file of this machine or an object of the same store),
    each under a name of its own generation, beside what an older one left (``written``:
    names of this generation's files already there); then write ``markers`` in order (the
    first is the switch: it names the new files); then delete every other object below
    ``dest``."""
    upload_all([(src, dest.child(name)) for name, src in files.items()])
    try:
        confirm_held(dest)  # a run whose lease was taken over switches nothing
    except LockedError:
        for name in files:
            dest.child(name).remove()
        raise
    for name, data in markers:
        dest.child(name).write_bytes(data)
    keep = set(files) | set(written) | {name for name, _ in markers}
    for rel in dest.files():
        if rel not in keep:
            dest.child(rel).remove()


UPLOAD_THREADS = 8


def upload_all(pairs: list[tuple[Location, Location]]) -> None:
    """Copy (source, destination) pairs, a few at a time: a local file is uploaded, an
    object copied on its store. The first failure is raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
        for future in [pool.submit(dst.upload, src) for src, dst in pairs]:
            future.result()


def discard(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
