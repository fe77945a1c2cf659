"""Tokenized shards: discovery, format detection, fingerprints, planning into units.

Formats
-------
- Parquet: one document per row, a list<integer> column (default ``tokens``).
- Flat token files (nanoGPT / OLMo): ``.bin`` and header-less ``.npy`` memmaps
  are raw little-endian arrays of ``--dtype``; a true ``.npy`` (numpy magic
  bytes) carries its own dtype. Documents are split at ``--doc-sep``; the
  separator belongs to no n-gram.
The records of shards and units, and reading them: `reading`.
"""

from __future__ import annotations

import fnmatch
import glob as globlib
import itertools
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .errors import ConfigError, InputError
from .keys import MAX_TOKEN
from .names import FLAT_EXT, PARQUET_EXT, TEXT_HINT, is_text_file, token_file
from .reading import FLAT_DTYPES, ReadOptions, Shard, Unit, reading, short_error
from .storage import filesystem, is_remote

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
    what: str = ".parquet, .bin or .npy files",
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
    what: str = ".parquet, .bin or .npy files",
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


def _flat_shard(
    fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
) -> Shard:
    size = info.size
    offset = 0
    dtype = FLAT_DTYPES[opts.dtype]
    if path.lower().endswith(".npy"):
        with fs.open_input_file(path) as f:
            head = f.read(min(size, 4096))
        if head.startswith(NPY_MAGIC):
            import io

            buf = io.BytesIO(head)
            try:
                version = np.lib.format.read_magic(buf)
                reader = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _fortran, dt = reader(buf)
            except Exception as exc:  # noqa: BLE001
                raise InputError(uri, f"unreadable .npy header: {exc}") from None
            if len(shape) != 1:
                raise InputError(uri, f".npy array must be 1-D, found shape {shape}")
            if dt.kind not in "iu":
                raise InputError(uri, f".npy dtype {dt} is not an integer type")
            offset = buf.tell()
            dtype = dt
            expected = offset + shape[0] * dt.itemsize
            if size != expected:
                raise InputError(uri, f"truncated .npy: {size} bytes, header says {expected}")
    if (size - offset) % dtype.itemsize:
        raise InputError(
            uri,
            f"size {size - offset} bytes is not a multiple of {dtype} "
            f"({dtype.itemsize} bytes); wrong --dtype?",
        )
    from .guards import check_flat, report

    blocks = flat_blocks(fs, path, size)
    n_items = (size - offset) // dtype.itemsize
    report(check_flat(uri, blocks, offset, dtype, n_items, opts.doc_sep), opts.strict)
    return Shard(
        uri=uri,
        format="flat",
        size=size,
        mtime=_mtime(info),
        dtype=dtype.str,
        offset=offset,
        n_items=n_items,
        checksum=_digest(size, blocks),
    )


SAMPLE_BLOCKS = 64  # flat files: checksummed 4 KiB blocks, evenly spaced (plus head and tail)


def content_checksum(fs: pafs.FileSystem, path: str, size: int, fmt: str) -> str:
    """A cheap content fingerprint: sha256 of a Parquet file's footer (its metadata:
    every page's offsets, sizes and statistics), or of a flat file's `flat_blocks`. With
    size and mtime it tells a shard that changed in place from the one that was read
    before."""
    if fmt != "parquet":
        return _digest(size, flat_blocks(fs, path, size))
    footer = b""
    with fs.open_input_file(path) as f:
        if size >= 12:
            tail = f.read_at(8, size - 8)
            n = min(int.from_bytes(tail[:4], "little"), size - 8)
            footer = f.read_at(n + 8, size - 8 - n)
    return _digest(size, [(0, footer)])


def flat_blocks(fs: pafs.FileSystem, path: str, size: int) -> list[tuple[int, bytes]]:
    """(offset, bytes) of a flat file's first and last 64 KiB and SAMPLE_BLOCKS 4 KiB
    blocks evenly spaced between them: its checksum's input and `guards`' sample."""
    ends = {0, max(size - 65536, 0)}  # head and tail: 64 KiB each
    spots = ends | {i * size // (SAMPLE_BLOCKS + 1) for i in range(1, SAMPLE_BLOCKS + 1)}
    with fs.open_input_file(path) as f:
        return [(at, f.read_at(65536 if at in ends else 4096, at)) for at in sorted(spots)]


def _digest(size: int, blocks: list[tuple[int, bytes]]) -> str:
    import hashlib

    h = hashlib.sha256(str(size).encode())
    for _, data in blocks:
        h.update(data)
    return h.hexdigest()[:32]


def _mtime(info: pafs.FileInfo) -> float | None:
    return info.mtime.timestamp() if info.mtime is not None else None


def _parquet_shard(
    fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
) -> Shard:
    try:
        with fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
    except Exception as exc:  # noqa: BLE001
        raise InputError(uri, f"not a readable Parquet file ({short_error(exc)})") from None
    if opts.column not in schema.names:
        raise InputError(
            uri, f"no column {opts.column!r} (columns: {', '.join(schema.names)}); set --column"
        )
    typ = schema.field(opts.column).type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_integer(
        typ.value_type
    ):
        raise InputError(uri, f"column {opts.column!r} has type {typ}, expected a list of integers")
    leaf = [
        i
        for i in range(meta.num_columns)
        if meta.schema.column(i).path.split(".")[0] == opts.column
    ][0]
    groups = []
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        # a corrupt footer can list fewer columns in a row group than in the schema: Arrow
        # aborts the process on .column() past them, so it is checked first
        if group.num_columns != meta.num_columns:
            raise InputError(
                uri,
                f"corrupt Parquet metadata (row group {i} has "
                f"{group.num_columns} columns, the schema {meta.num_columns})",
            )
        groups.append(group.column(leaf).num_values)
    return Shard(
        uri=uri,
        format="parquet",
        size=info.size,
        mtime=_mtime(info),
        n_items=meta.num_rows,
        row_groups=groups,
        checksum=content_checksum(fs, path, info.size, "parquet"),
    )


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
        low = path.lower()
        if low.endswith(PARQUET_EXT):
            shards.append(_parquet_shard(fs, path, uri, info, opts))
        elif low.endswith(FLAT_EXT):
            shards.append(_flat_shard(fs, path, uri, info, opts))
        else:
            hint = TEXT_HINT.replace("it holds", "it is") if is_text_file(path) else ""
            raise InputError(uri, f"unknown format (expected .parquet, .bin or .npy){hint}")
    return shards


def tokens_of(shards: list[Shard], units: list[Unit]) -> int:
    """How many token slots the units cover (flat: items, separators included; Parquet:
    list values), from the plan alone."""
    return sum(
        u.stop - u.start
        if shards[u.shard].format == "flat"
        else sum(shards[u.shard].row_groups[u.start : u.stop])
        for u in units
    )


def plan_units(shards: list[Shard], unit_tokens: int) -> list[Unit]:
    """Split shards into units of at most `unit_tokens` tokens each: a flat shard into
    as few as that allows, of equal size (a shard of 1.5 units: two of 0.75, which
    two cores count in the same time, not 1 and 0.5); a Parquet shard at row groups."""
    units: list[Unit] = []
    for s_idx, shard in enumerate(shards):
        if shard.format == "flat":
            units.extend(Unit(s_idx, a, b) for a, b in even_ranges(shard.n_items, unit_tokens))
        else:
            units.extend(Unit(s_idx, a, b) for a, b in group_ranges(shard.row_groups, unit_tokens))
    return units


def even_ranges(n: int, most: int) -> list[tuple[int, int]]:
    """[0, n) cut into the fewest ranges of at most ``most`` items, of equal size."""
    parts = -(-n // most)
    cuts = [n * i // parts for i in range(parts + 1)] if parts else []
    return list(itertools.pairwise(cuts))


def group_ranges(sizes: list[int], most: int) -> list[tuple[int, int]]:
    """Runs [a, b) of consecutive groups (of ``sizes`` items each) of at most ``most``
    items, or one group when it alone holds more."""
    out, first, size = [], 0, 0
    for g, n in enumerate(sizes):
        if size and size + n > most:
            out.append((first, g))
            first, size = g, 0
        size += n
    if first < len(sizes):
        out.append((first, len(sizes)))
    return out


def shard_record(shard: Shard) -> dict[str, Any]:
    d = asdict(shard)
    d.pop("row_groups")
    return d
