"""What a shard and a unit of work are, and reading a unit as a token stream.

A *unit* is the work of one task: a range of row groups of one Parquet file,
or a token range ``[start, stop)`` of one flat file. A flat unit reads K-1
tokens past its end so that every n-gram *starting* in its range is seen
exactly once, whatever the range boundaries are.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import FgramError, InputError, StorageUnavailable
from .failures import failure, first_line
from .jit import Array, U32s, compiled
from .keys import INVALID, MAX_TOKEN, SENTINEL
from .scratch import Scratch, work_array
from .storage import filesystem, is_remote


@compiled(cache=True, nogil=True)
def separate(
    body: Array, sep: int, own: int, sep_before: bool, tokens: U32s
) -> tuple[int, int, int, int]:
    """A flat range's raw values -> uint32 tokens with 2**32-1 at separators, in one pass.

    ``own``: how many leading values belong to the range (the rest is overlap);
    ``sep_before``: a separator (or the file start) precedes the first value.
    Returns (documents started among the own values, own non-separator
    values, min and max of the non-separator values; 0, -1 when none).
    Branch-free loop bodies (selects, not jumps: the compiler vectorises them).
    """
    n = len(body)
    m = min(own, n)
    big = np.int64(1) << np.int64(62)
    vmin = big
    vmax = -big
    docs = np.int64(0)
    seps = np.int64(0)
    prev = np.int64(1) if sep_before else np.int64(0)
    for i in range(m):
        v = np.int64(body[i])
        s = np.int64(v == sep)
        tokens[i] = INVALID if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        docs += prev & (1 - s)
        seps += s
        prev = s
    rest = np.int64(0)
    for i in range(m, n):
        v = np.int64(body[i])
        s = np.int64(v == sep)
        tokens[i] = INVALID if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        rest += s
    if seps + rest == n:
        return docs, np.int64(0), np.int64(0), np.int64(-1)
    return docs, m - seps, vmin, vmax


FLAT_DTYPES: dict[str, np.dtype] = {
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "int32": np.dtype("<i4"),
}


@dataclass
class ReadOptions:
    column: str = "tokens"
    dtype: str = "uint16"  # for .bin and header-less .npy
    doc_sep: int | None = None  # None: a flat file is one document
    storage: dict[str, Any] = field(default_factory=dict)  # storage options (`storage.filesystem`)
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


def short_error(exc: Exception) -> str:
    return first_line(exc, limit=200)


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
def reading(uri: str) -> Iterator[None]:
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
            else InputError(uri, f"cannot read ({short_error(exc)})")
        ) from None


def read_unit(
    shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch: Scratch | None = None
) -> Stream:
    """Read one unit as a token stream; `overlap` extra tokens past a flat range's end.

    With a ``scratch`` (`scratch.Scratch`), a flat range is read into its
    buffers (the stream's tokens are valid until the next read with it)."""
    with reading(shard.uri):
        if shard.format == "flat":
            return _read_flat(shard, unit, opts, overlap, scratch)
        return _read_parquet(shard, unit, opts)


def read_flat_range(
    shard: Shard,
    lo: int,
    hi: int,
    scratch: Scratch | None = None,
    storage: dict[str, Any] | None = None,
) -> np.ndarray:
    """Raw token values [lo, hi) of a flat file (clipped to the file), read in one call
    (into ``scratch``'s "raw" buffer when given)."""
    fs, path = filesystem(shard.uri, storage)
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
    shard: Shard, unit: Unit, columns: list[str] | None, storage: dict[str, Any] | None = None
) -> pa.Table:
    fs, path = filesystem(shard.uri, storage)
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


def _read_flat(
    shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch: Scratch | None
) -> Stream:
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
