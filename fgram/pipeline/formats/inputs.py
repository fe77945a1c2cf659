"""Tokenized shards: finding the input files, describing each by its format (`registry`:
Parquet, flat ``.bin``/``.npy``, ...) and planning them into units of work. The records
of shards and units: `reading`."""

from __future__ import annotations

import fnmatch
import glob as globlib
import os
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import pyarrow.fs as pafs

from fgram.pipeline.errors import ConfigError, InputError
from fgram.pipeline.formats.base import ShardFormat
from fgram.pipeline.formats.names import TEXT_HINT, is_text_file
from fgram.pipeline.formats.reading import FLAT_DTYPES, ReadOptions, Shard, Unit, reading
from fgram.pipeline.formats.registry import (
    KNOWN,
    format_for,
    format_of,
    from_prefix,
    link,
    shard_of,
    token_file,
)
from fgram.pipeline.io.storage import filesystem, is_remote
from fgram.pipeline.kernels.keys import MAX_TOKEN

PLAN_THREADS = 16  # shards described at once on an object store
INDEX_JSON = "index.json"  # MDS's and LitData's: given, its folder is read


def _uri(fs: pafs.FileSystem, path: str, original: str) -> str:
    if "://" in original and not isinstance(fs, pafs.LocalFileSystem):
        scheme = original.split("://", 1)[0]
        return f"{scheme}://{path}"
    return path


def discover(
    paths: list[str],
    storage: dict[str, Any] | None = None,
    known: Callable[[str], bool] = token_file,
    what: str = f"{KNOWN} files",
) -> list[tuple[pafs.FileSystem, str, str]]:
    """Expand files, directories and globs into (fs, fs_path, uri), in a stable order. A
    folder gives the files below it that are ``known`` (``what``: those, for an error),
    hidden ones (``.``, ``_``) left out."""
    found: list[tuple[pafs.FileSystem, str, str]] = []
    if not paths:
        raise ConfigError("no input given")
    for original in paths:
        fs, path = filesystem(original, storage)
        with reading(original):
            found.extend(_expand(fs, path, original, known, what))
    seen: dict[Any, str] = {}
    unique = []
    for item in found:
        key = _identity(*item)
        if key in seen:
            if seen[key] != item[2]:  # a link to, or a second name of, a file already taken
                warn_once(f"{item[2]}: the same file as {seen[key]}; read once")
            continue
        seen[key] = item[2]
        unique.append(item)
    return unique


def _identity(fs: pafs.FileSystem, path: str, uri: str) -> Any:
    """What names a file whatever the path to it: its device and inode on this machine
    (links and hard links alike), else its URI."""
    if isinstance(fs, pafs.LocalFileSystem):
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    return uri


def _local_glob(pattern: str) -> list[str]:
    """The files a local pattern matches, in name order. ``**`` (any folders) walks its
    root with `_local_files`, so a loop of links ends (Python's recursive glob follows
    it forever); other patterns match one level per part, as glob does."""
    if "**" not in pattern:
        return sorted(m for m in globlib.glob(pattern) if os.path.isfile(m))
    root = pattern[: min(pattern.find(c) for c in "*?[" if c in pattern)].rpartition(os.sep)[0]
    regex = re.compile(_glob_regex(pattern))
    return sorted(f for f in _local_files(root or os.curdir) if regex.fullmatch(f))


def _glob_regex(pattern: str) -> str:
    """A glob pattern as a regular expression: ``**/`` any folders (none too), ``*`` and
    ``?`` within one name, ``[...]`` a set."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append(f"(?:.*{re.escape(os.sep)})?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append(f"[^{re.escape(os.sep)}]*")
            i += 1
        elif pattern[i] == "?":
            out.append(f"[^{re.escape(os.sep)}]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _local_files(folder: str) -> list[str]:
    """The files below a local folder, links followed, every folder walked once: a link
    back up (a loop) or a second link to a folder walked already is left out, with a
    warning."""
    files, walked = [], set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        st = os.stat(root)
        if (st.st_dev, st.st_ino) in walked:
            dirs[:] = []
            warn_once(f"{root}: a link to a folder read already; read once")
            continue
        walked.add((st.st_dev, st.st_ino))
        dirs.sort()
        files += [p for n in names if os.path.isfile(p := os.path.join(root, n))]
    return files


_WARNED: set[str] = set()


def warn_once(line: str) -> None:
    """A warning on stderr, once per process (inputs are listed more than once a run)."""
    if line not in _WARNED:
        _WARNED.add(line)
        sys.stderr.write(f"fgram: warning: {line}\n")


def check_inputs(
    paths: list[str],
    storage: dict[str, Any] | None = None,
    known: Callable[[str], bool] = token_file,
    what: str = f"{KNOWN} files",
) -> None:
    """The inputs exist, checked before anything slow starts (a JVM takes seconds): on
    this machine's disk by listing them (files, folders with inputs, matching globs); on
    an object store by one request per argument that is not a pattern (the bucket and
    the object or prefix are there and readable; listing a big prefix would cost more)."""
    if not paths:
        raise ConfigError("no input given")
    local = [p for p in paths if not is_remote(str(p))]
    if local:
        discover(local, known=known, what=what)
    for original in paths:
        if is_remote(str(original)) and not any(ch in str(original) for ch in "*?["):
            fs, path = filesystem(original, storage)
            with reading(original):
                if fs.get_file_info(path).type == pafs.FileType.NotFound:
                    bucket = path.split("/", 1)[0]
                    there = fs.get_file_info(bucket).type != pafs.FileType.NotFound
                    if there:
                        _prefixed(fs, path, original)  # a shard's prefix, or an error
                        continue
                    raise InputError(
                        original,
                        "no such file or directory" if there else f"no such bucket {bucket!r}",
                    )


def holds_text(paths: list[str], storage: dict[str, Any] | None = None) -> bool:
    """Whether inputs are text to tokenize: JSON Lines or .txt files by their names
    (Parquet is read as token shards; tokenize Parquet text first)."""
    from fgram.pipeline.formats.names import TEXT_FILES, text_kind

    try:
        files = discover(paths, storage, known=is_text_file, what=TEXT_FILES)
    except InputError:
        return False
    kinds = {(text_kind(uri) or ("", None))[0] for _, _, uri in files}
    return bool(kinds) and kinds <= {"jsonl", "txt"}


def _prefixed(fs: pafs.FileSystem, path: str, original: str) -> str:
    """The shard a name that is no file stands for as a prefix (a shard and its index
    beside it, which must both be there), else an error naming what is missing."""
    pair = from_prefix(path)
    there = [fs.get_file_info(p).type == pafs.FileType.File for p in pair]
    if pair and all(there):
        return pair[0]
    if any(there):
        missing = ", ".join(os.path.basename(p) for p, t in zip(pair, there, strict=True) if not t)
        raise InputError(original, f"no such file; as a prefix, {missing} is missing")
    raise InputError(original, "no such file or directory")


def _expand(
    fs: pafs.FileSystem, path: str, original: str, known: Callable[[str], bool], what: str
) -> list[tuple[pafs.FileSystem, str, str]]:
    """One input argument's files: a glob's matches, a folder's known files, or the file."""
    if any(ch in path for ch in "*?["):
        if isinstance(fs, pafs.LocalFileSystem):
            matches = _local_glob(path)
        else:
            root = path.split("*")[0].rsplit("/", 1)[0]
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
            matches = sorted(
                i.path
                for i in infos
                if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)
            )
        if not matches:
            raise InputError(original, "no file matches this pattern")
        return [(fs, m, _uri(fs, m, original)) for m in matches]
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        shard = _prefixed(fs, path, original)
        return [(fs, shard, _uri(fs, shard, original + shard[len(path) :]))]
    if info.type != pafs.FileType.Directory and os.path.basename(path) != INDEX_JSON:
        return [(fs, path, _uri(fs, path, original))]
    beside = info.type != pafs.FileType.Directory  # an index.json: the files beside it
    if beside:
        path, original = path.rpartition("/")[0], original.rpartition("/")[0] or "."
    if isinstance(fs, pafs.LocalFileSystem) and not beside:
        listed = _local_files(path)
    else:
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=not beside))
        listed = [i.path for i in infos if i.type == pafs.FileType.File]
    files = sorted(
        f
        for f in listed
        if known(f)
        and not os.path.basename(f).startswith((".", "_"))
        and not any(p.startswith((".", "_")) for p in os.path.relpath(f, path).split(os.sep)[:-1])
    )
    if not files:
        text = known is token_file and any(is_text_file(f) for f in listed)
        raise InputError(original, f"directory holds no {what}{TEXT_HINT if text else ''}")
    return [(fs, f, _uri(fs, f, original)) for f in files]


def plan_shards(paths: list[str], opts: ReadOptions) -> list[Shard]:
    """Discover and validate every input file (metadata only; no token is read)."""
    if opts.dtype not in FLAT_DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(FLAT_DTYPES)}, got {opts.dtype!r}")
    if opts.doc_sep is not None and not 0 <= opts.doc_sep <= MAX_TOKEN:
        raise ConfigError(f"--doc-sep must be in 0..{MAX_TOKEN}, got {opts.doc_sep}")
    found = []
    for fs, path, uri, exists in _paired(discover(paths, opts.storage)):
        fmt = format_for(path, exists)
        if fmt is None:
            hint = TEXT_HINT.replace("it holds", "it is") if is_text_file(path) else ""
            raise InputError(uri, f"unknown format (expected {KNOWN}){hint}")
        found.append((fmt, fs, path, uri))

    def describe(item: tuple[ShardFormat, pafs.FileSystem, str, str]) -> Shard:
        fmt, fs, path, uri = item
        with reading(uri):
            info = fs.get_file_info(path)
        return fmt.describe(fs, path, uri, info, opts)

    if not any(is_remote(uri) for *_, uri in found):
        shards = [describe(item) for item in found]
    else:
        # on an object store each shard's metadata costs requests (a footer, an index's
        # ends, an Arrow stream's batch headers): described side by side, errors in order
        with ThreadPoolExecutor(PLAN_THREADS) as pool:
            shards = list(pool.map(describe, found))
    unused = not any(format_of(s).reads_doc_sep(opts) for s in shards)
    if opts.doc_sep is not None and shards and unused:
        kinds = ", ".join(sorted({s.format for s in shards}))
        warn_once(
            f"--doc-sep {opts.doc_sep} is not used: the documents of these inputs "
            f"({kinds}) are where their format says"
        )
    return link(shards, opts)


def _paired(
    files: list[tuple[pafs.FileSystem, str, str]],
) -> list[tuple[pafs.FileSystem, str, str, Callable[[str], bool]]]:
    """The shards among the files found, each with a test of which files are beside it
    (one listing a folder, on demand). A file read beside a shard (an index) is left
    out, or stands for its shard when that was not found itself (which must exist)."""
    listed = {path for _, path, _ in files}
    folders: dict[str, set[str]] = {}

    def exists_in(fs: pafs.FileSystem) -> Callable[[str], bool]:
        def exists(p: str) -> bool:
            folder = p.rpartition("/")[0]  # absolute here, a bucket's key on a store
            if p not in listed and folder not in folders:
                sel = pafs.FileSelector(folder, allow_not_found=True)
                folders[folder] = {i.path for i in fs.get_file_info(sel)}
            return p in listed or p in folders[folder]

        return exists

    out, taken = [], set()
    for fs, path, uri in files:
        exists = exists_in(fs)
        owner = shard_of(path, exists)
        if owner is not None:
            if owner in listed:
                continue  # read with its shard
            if not exists(owner):
                raise InputError(uri, f"read beside {os.path.basename(owner)}, which is missing")
            uri = uri[: len(uri) - len(os.path.basename(path))] + os.path.basename(owner)
            path = owner
        if path not in taken:
            taken.add(path)
            out.append((fs, path, uri, exists))
    return out


def tokens_of(shards: list[Shard], units: list[Unit]) -> int:
    """How many token slots the units cover (flat: items, separators included; Parquet:
    list values), from the plan alone."""
    return sum(format_of(shards[u.shard]).tokens_in(shards[u.shard], u) for u in units)


def plan_units(shards: list[Shard], unit_tokens: int) -> list[Unit]:
    """Split shards into units of at most `unit_tokens` tokens each, as each one's format
    cuts it."""
    return [
        Unit(s_idx, a, b)
        for s_idx, shard in enumerate(shards)
        for a, b in format_of(shard).units(shard, unit_tokens)
    ]


def shard_record(shard: Shard) -> dict[str, Any]:
    d = asdict(shard)
    d.pop("row_groups")
    d.pop("spans")  # planned again where needed (`arrow`)
    return d
