"""What a shard, a unit of work and a token stream are, for every format, and the checks
of what is read.

A *unit* is the work of one task: a part of one shard, in its format's coordinates (a
range of row groups of a Parquet file, a token range ``[start, stop)`` of a flat file).
Its format (`base.ShardFormat`, found by `registry.format_of`) reads it as a `Stream`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fgram.pipeline.errors import FgramError, InputError, StorageUnavailable
from fgram.pipeline.formats.dtypes import TOKEN_DTYPES
from fgram.pipeline.io.failures import failure, first_line
from fgram.pipeline.io.storage import is_remote
from fgram.pipeline.kernels.keys import MAX_TOKEN
from fgram.pipeline.kernels.scratch import Scratch, work_array
from fgram.pipeline.kernels.streams import lists

FLAT_DTYPES: dict[str, np.dtype] = {name: np.dtype(t) for name, t in TOKEN_DTYPES.items()}


@dataclass
class ReadOptions:
    column: str = "tokens"
    dtype: str = "uint16"  # for .bin and header-less .npy
    doc_sep: int | None = None  # None: a flat file is one document
    storage: dict[str, Any] = field(default_factory=dict)  # storage options (`storage.filesystem`)
    strict: bool = False  # a flat file's sample that looks wrong fails (`guards`)
    samples_are_documents: bool = False  # MDS, LitData: a sample ends a document
    # every token read replaced by token_map[token] (uint32): Engram's canonical ids
    token_map: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass
class Shard:
    uri: str  # as the user can read it back (path or URI)
    format: str  # its format's name (`registry.FORMATS`)
    size: int
    mtime: float | None
    dtype: str | None = None  # flat: numpy dtype str
    offset: int = 0  # flat: header bytes
    n_items: int = 0  # flat: array length; parquet: rows
    row_groups: list[int] = field(default_factory=list)  # parquet: values per row group
    checksum: str | None = None  # content fingerprint (the format's `describe`)
    layout: dict[str, Any] = field(default_factory=dict)  # what reading it needs (an index)
    spans: list[int] = field(default_factory=list)  # arrow: each batch's offset, then the end


@dataclass
class Unit:
    shard: int  # index into the shard list
    start: int  # in the format's coordinates (flat: first token; parquet: first row group)
    stop: int  # exclusive


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


def stream_from_lists(
    lengths: np.ndarray, values: np.ndarray, uri: str = "<memory>", scratch: Scratch | None = None
) -> Stream:
    """Documents given as lengths + concatenated values -> a token stream (SENTINEL after
    each), in one pass (`streams.lists`; into ``scratch``'s "tokens" buffer when given)."""
    ndocs = len(lengths)
    if int(np.sum(lengths)) != len(values):
        raise InputError(uri, "its documents' lengths and values disagree")
    tokens = work_array(scratch, "tokens", len(values) + ndocs, np.uint32)
    lowest, highest = lists(values, np.asarray(lengths, np.int64), tokens)
    check_bounds(lowest, highest, uri)
    return Stream(
        tokens=tokens, limit=len(tokens), documents=ndocs, n_tokens=len(values), max_token=highest
    )
