"""Tokenized shards: finding the input files, describing each by its format (`registry`:
Parquet, flat ``.bin``/``.npy``, ...) and planning them into units of work. The records
of shards and units: `reading`."""

from __future__ import annotations

import fnmatch
import glob as globlib
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pyarrow.fs as pafs

from fgram.pipeline.errors import ConfigError, InputError
from fgram.pipeline.formats.names import TEXT_HINT, is_text_file
from fgram.pipeline.formats.reading import FLAT_DTYPES, ReadOptions, Shard, Unit, reading
from fgram.pipeline.formats.registry import KNOWN, format_for, format_of, token_file
from fgram.pipeline.io.storage import filesystem, is_remote
from fgram.pipeline.kernels.keys import MAX_TOKEN

NPY_MAGIC = b"\x93NUMPY"


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
    seen, unique = set(), []
    for item in found:
        if item[2] not in seen:
            seen.add(item[2])
            unique.append(item)
    return unique


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


def _expand(
    fs: pafs.FileSystem, path: str, original: str, known: Callable[[str], bool], what: str
) -> list[tuple[pafs.FileSystem, str, str]]:
    """One input argument's files: a glob's matches, a folder's known files, or the file."""
    if any(ch in path for ch in "*?["):
        if isinstance(fs, pafs.LocalFileSystem):
            matches = sorted(m for m in globlib.glob(path, recursive=True) if os.path.isfile(m))
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
        raise InputError(original, "no such file or directory")
    if info.type != pafs.FileType.Directory:
        return [(fs, path, _uri(fs, path, original))]
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    files = sorted(
        i.path
        for i in infos
        if i.type == pafs.FileType.File
        and known(i.path)
        and not os.path.basename(i.path).startswith((".", "_"))
        and not any(
            p.startswith((".", "_")) for p in os.path.relpath(i.path, path).split(os.sep)[:-1]
        )
    )
    if not files:
        text = known is token_file and any(
            i.type == pafs.FileType.File and is_text_file(i.path) for i in infos
        )
        raise InputError(original, f"directory holds no {what}{TEXT_HINT if text else ''}")
    return [(fs, f, _uri(fs, f, original)) for f in files]


def plan_shards(paths: list[str], opts: ReadOptions) -> list[Shard]:
    """Discover and validate every input file (metadata only; no token is read)."""
    if opts.dtype not in FLAT_DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(FLAT_DTYPES)}, got {opts.dtype!r}")
    if opts.doc_sep is not None and not 0 <= opts.doc_sep <= MAX_TOKEN:
        raise ConfigError(f"--doc-sep must be in 0..{MAX_TOKEN}, got {opts.doc_sep}")
    shards = []
    for fs, path, uri in discover(paths, opts.storage):
        with reading(uri):
            info = fs.get_file_info(path)
        fmt = format_for(path)
        if fmt is None:
            hint = TEXT_HINT.replace("it holds", "it is") if is_text_file(path) else ""
            raise InputError(uri, f"unknown format (expected {KNOWN}){hint}")
        shards.append(fmt.describe(fs, path, uri, info, opts))
    return shards


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
    return d
