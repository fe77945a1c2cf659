"""Tokenized shards: discovery, format detection, planning into units, reading.

Formats
-------
- Parquet: one document per row, a list<integer> column (default ``tokens``).
- Flat token files (nanoGPT / OLMo): ``.bin`` and header-less ``.npy`` memmaps
  are raw little-endian arrays of ``--dtype``; a true ``.npy`` (numpy magic
  bytes) carries its own dtype. Documents are split at ``--doc-sep``; the
  separator belongs to no n-gram.

A *unit* is the work of one task: a range of row groups of one Parquet file,
or a token range ``[start, stop)`` of one flat file. A flat unit reads K-1
tokens past its end so that every n-gram *starting* in its range is seen
exactly once, whatever the range boundaries are.
"""

from __future__ import annotations

import fnmatch
import glob as globlib
import itertools
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .compiled import separate
from .errors import ConfigError, FgramError, InputError, StorageUnavailable
from .kernels import MAX_TOKEN, SENTINEL, work_array
from .storage import failure, filesystem, first_line, is_remote

FLAT_DTYPES: dict[str, np.dtype] = {
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "int32": np.dtype("<i4"),
}
PARQUET_EXT = (".parquet", ".pq")
FLAT_EXT = (".bin", ".npy")
NPY_MAGIC = b"\x93NUMPY"


@dataclass
class ReadOptions:
    column: str = "tokens"
    dtype: str = "uint16"  # for .bin and header-less .npy
    doc_sep: int | None = None  # None: a flat file is one document
    storage: dict = field(default_factory=dict)  # storage options (`storage.filesystem`)
    strict: bool = False  # a flat file's sample that looks wrong fails (`guards`)


@dataclass
class Shard:
    uri: str  # as the user can read it back (path or URI)
    format: str  # "parquet" | "flat"
    size: int
    mtime: float | None
    dtype: str | None = None  # flat: numpy dtype str
    offset: int = 0  # flat: header bytes
    n_items: int = 0  # flat: array length; parquet: rows
    row_groups: list[int] = field(default_factory=list)  # parquet: values per row group
    checksum: str | None = None  # content fingerprint (see `content_checksum`)


@dataclass
class Unit:
    shard: int  # index into the shard list
    start: int  # flat: first token; parquet: first row group
    stop: int  # flat: end token (exclusive); parquet: end row group


def _filesystem(path: str, storage: dict | None = None) -> tuple[pafs.FileSystem, str]:
    return filesystem(path, storage)


def _uri(fs: pafs.FileSystem, path: str, original: str) -> str:
    if "://" in original and not isinstance(fs, pafs.LocalFileSystem):
        scheme = original.split("://", 1)[0]
        return f"{scheme}://{path}"
    return path


def _known(name: str) -> bool:
    base = os.path.basename(name)
    return not base.startswith((".", "_")) and base.lower().endswith(PARQUET_EXT + FLAT_EXT)


def discover(
    paths: list[str], storage: dict | None = None
) -> list[tuple[pafs.FileSystem, str, str]]:
    """Expand files, directories and globs into (fs, fs_path, uri), in a stable order."""
    found: list[tuple[pafs.FileSystem, str, str]] = []
    if not paths:
        raise ConfigError("no input given")
    for original in paths:
        fs, path = _filesystem(original, storage)
        with reading(original):
            found.extend(_expand(fs, path, original))
    seen, unique = set(), []
    for item in found:
        if item[2] not in seen:
            seen.add(item[2])
            unique.append(item)
    return unique


def check_inputs(paths: list[str], storage: dict | None = None) -> None:
    """The inputs exist, checked before anything slow starts (a JVM takes seconds): on
    this machine's disk by listing them (files, folders with inputs, matching globs); on
    an object store by one request per argument that is not a pattern (the bucket and
    the object or prefix are there and readable; listing a big prefix would cost more)."""
    if not paths:
        raise ConfigError("no input given")
    local = [p for p in paths if not is_remote(str(p))]
    if local:
        discover(local)
    for original in paths:
        if is_remote(str(original)) and not any(ch in str(original) for ch in "*?["):
            fs, path = _filesystem(original, storage)
            with reading(original):
                if fs.get_file_info(path).type == pafs.FileType.NotFound:
                    bucket = path.split("/", 1)[0]
                    there = fs.get_file_info(bucket).type != pafs.FileType.NotFound
                    raise InputError(
                        original,
                        "no such file or directory" if there else f"no such bucket {bucket!r}",
                    )


def _expand(fs, path: str, original: str) -> list[tuple[pafs.FileSystem, str, str]]:
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
        and _known(i.path)
        and not any(
            p.startswith((".", "_")) for p in os.path.relpath(i.path, path).split(os.sep)[:-1]
        )
    )
    if not files:
        raise InputError(original, "directory holds no .parquet, .bin or .npy files")
    return [(fs, f, _uri(fs, f, original)) for f in files]


def _flat_shard(fs, path, uri, info, opts: ReadOptions) -> Shard:
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


def content_checksum(fs, path: str, size: int, fmt: str) -> str:
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


def flat_blocks(fs, path: str, size: int) -> list[tuple[int, bytes]]:
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


def _mtime(info) -> float | None:
    return info.mtime.timestamp() if info.mtime is not None else None


def _parquet_shard(fs, path, uri, info, opts: ReadOptions) -> Shard:
    try:
        with fs.open_input_file(path) as f:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
    except Exception as exc:  # noqa: BLE001
        raise InputError(uri, f"not a readable Parquet file ({_short(exc)})") from None
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


def _short(exc: Exception) -> str:
    return first_line(exc, limit=200)


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
            raise InputError(uri, "unknown format (expected .parquet, .bin or .npy)")
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
            n = -(-shard.n_items // unit_tokens)
            cuts = [shard.n_items * i // n for i in range(n + 1)] if n else []
            units.extend(Unit(s_idx, a, b) for a, b in itertools.pairwise(cuts))
        else:
            first, size = 0, 0
            for g, values in enumerate(shard.row_groups):
                if size and size + values > unit_tokens:
                    units.append(Unit(s_idx, first, g))
                    first, size = g, 0
                size += values
            if first < len(shard.row_groups):
                units.append(Unit(s_idx, first, len(shard.row_groups)))
    return units


@dataclass
class Stream:
    """The tokens of one unit as a uint32 stream with SENTINEL at document boundaries."""

    tokens: np.ndarray
    limit: int  # n-grams starting at positions >= limit belong to the next unit
    documents: int
    n_tokens: int
    max_token: int = -1  # the largest token id read (the overlap included); -1: none


def check_range(values: np.ndarray, uri: str) -> int:
    """Check the token ids' bounds; returns the largest (-1 when there are none)."""
    if not len(values):
        return -1
    highest = int(values.max())
    check_bounds(int(values.min()) if values.dtype.kind == "i" else 0, highest, uri)
    return highest


def check_bounds(lowest: int, highest: int, uri: str) -> None:
    """Token ids must lie in 0..MAX_TOKEN."""
    if lowest < 0:
        raise InputError(uri, f"negative token id {lowest}")
    if highest > MAX_TOKEN:
        raise InputError(uri, f"token id {highest} exceeds {MAX_TOKEN}")


@contextmanager
def reading(uri: str):
    """Corrupt or unreadable data surfaces as an InputError naming the file."""
    try:
        yield
    except FgramError:
        raise
    except Exception as exc:  # noqa: BLE001
        err = failure(uri, exc, reading=True)  # an object store down: worth a --resume
        raise (
            err
            if isinstance(err, StorageUnavailable) or is_remote(uri) and isinstance(exc, OSError)
            else InputError(uri, f"cannot read ({_short(exc)})")
        ) from None


def read_unit(shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch=None) -> Stream:
    """Read one unit as a token stream; `overlap` extra tokens past a flat range's end.

    With a ``scratch`` (`kernels.Scratch`), a flat range is read into its
    buffers (the stream's tokens are valid until the next read with it)."""
    with reading(shard.uri):
        if shard.format == "flat":
            return _read_flat(shard, unit, opts, overlap, scratch)
        return _read_parquet(shard, unit, opts)


def read_flat_range(
    shard: Shard, lo: int, hi: int, scratch=None, storage: dict | None = None
) -> np.ndarray:
    """Raw token values [lo, hi) of a flat file (clipped to the file), read in one call
    (into ``scratch``'s "raw" buffer when given)."""
    fs, path = _filesystem(shard.uri, storage)
    dt = np.dtype(shard.dtype)
    lo, hi = max(lo, 0), min(hi, shard.n_items)
    with fs.open_input_file(path) as f:
        if scratch is None:
            arr = np.frombuffer(
                f.read_at((hi - lo) * dt.itemsize, shard.offset + lo * dt.itemsize), dtype=dt
            )
        else:
            arr = scratch.get("raw", hi - lo, dt)
            f.seek(shard.offset + lo * dt.itemsize)
            view, got = arr.view(np.uint8), 0
            while got < len(view):
                m = f.readinto(view[got:])
                if not m:
                    break
                got += m
            arr = arr[: got // dt.itemsize]
    if len(arr) != hi - lo:
        raise InputError(shard.uri, "file shrank while being read")
    return arr


def read_row_groups(
    shard: Shard, unit: Unit, columns: list[str] | None, storage: dict | None = None
) -> pa.Table:
    fs, path = _filesystem(shard.uri, storage)
    with fs.open_input_file(path) as f:
        return pq.ParquetFile(f).read_row_groups(
            list(range(unit.start, unit.stop)), columns=columns
        )


def list_column(table: pa.Table, name: str, uri: str) -> tuple[np.ndarray, np.ndarray]:
    """(document lengths, concatenated token values) of a list<integer> column."""
    lens, vals = [], []
    for chunk in table.column(name).chunks:
        lengths = chunk.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        values = chunk.flatten()
        if values.null_count:
            raise InputError(uri, f"null token id in column {name!r}")
        lens.append(lengths.astype(np.int64))
        vals.append(values.to_numpy(zero_copy_only=False))
    return (
        np.concatenate(lens) if lens else np.zeros(0, np.int64),
        np.concatenate(vals) if vals else np.zeros(0, np.int64),
    )


def _read_flat(shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch) -> Stream:
    lo = max(unit.start - 1, 0)
    arr = read_flat_range(shard, lo, unit.stop + overlap, scratch, opts.storage)
    head = unit.start - lo  # 1 if we read the token before the range, else 0
    body = arr[head:]
    own = unit.stop - unit.start
    if opts.doc_sep is not None:
        tokens = work_array(scratch, "tokens", len(body), np.uint32)
        sep_before = head == 0 or bool(arr[0] == opts.doc_sep)
        documents, n_tokens, vmin, vmax = separate(body, opts.doc_sep, own, sep_before, tokens)
        check_bounds(vmin, vmax, shard.uri)
    else:
        vmax = check_range(body, shard.uri)
        tokens = body.astype(np.uint32)
        n_tokens = own
        documents = 1 if (unit.start == 0 and shard.n_items > 0) else 0
    return Stream(
        tokens=tokens, limit=own, documents=documents, n_tokens=n_tokens, max_token=int(vmax)
    )


def _read_parquet(shard: Shard, unit: Unit, opts: ReadOptions) -> Stream:
    table = read_row_groups(shard, unit, [opts.column], opts.storage)
    lengths, values = list_column(table, opts.column, shard.uri)
    return stream_from_lists(lengths, values, shard.uri)


def stream_from_lists(lengths: np.ndarray, values: np.ndarray, uri: str = "<memory>") -> Stream:
    """Documents given as lengths + concatenated values -> a token stream (SENTINEL after each)."""
    highest = check_range(values, uri)
    ndocs = len(lengths)
    tokens = np.full(len(values) + ndocs, SENTINEL, dtype=np.uint32)
    if len(values):
        doc_of_value = np.repeat(np.arange(ndocs, dtype=np.int64), lengths)
        tokens[np.arange(len(values), dtype=np.int64) + doc_of_value] = values
    return Stream(
        tokens=tokens, limit=len(tokens), documents=ndocs, n_tokens=len(values), max_token=highest
    )


def shard_record(shard: Shard) -> dict:
    d = asdict(shard)
    d.pop("row_groups")
    return d
