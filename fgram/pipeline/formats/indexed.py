"""Raw token files whose documents an index beside them gives (Megatron's ``.idx``,
datatrove's ``.ds.index``): the flat format's units, token ranges and tags, with
document starts found in the index instead of at a separator.

A unit reads only its part of the index: the document starts in its range, found by a
binary search of the index's sorted arrays on the file (one small read a step, then
one block), so that neither the driver nor a task ever holds a whole index.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Match, Tagged, digest, mtime
from fgram.pipeline.formats.flat import FlatFormat, flat_blocks, read_range
from fgram.pipeline.formats.reading import (
    ReadOptions,
    Shard,
    Stream,
    Unit,
    check_bounds,
    check_range,
    reading,
)
from fgram.pipeline.io.storage import filesystem
from fgram.pipeline.kernels.scratch import Scratch, work_array
from fgram.pipeline.kernels.streams import place

BLOCK = 8192  # entries a binary search reads at once at its last step


class FileArray:
    """An array of little-endian integers inside an open file: ``count`` entries of
    ``dtype`` from byte ``offset``, read by ranges; `search` and `between` take it
    sorted."""

    def __init__(self, f: Any, offset: int, count: int, dtype: str, uri: str) -> None:
        self.f, self.offset, self.count, self.uri = f, offset, count, uri
        self.dtype = np.dtype(dtype)

    def read(self, a: int, b: int) -> np.ndarray:
        """Entries [a, b)."""
        size = self.dtype.itemsize
        data = self.f.read_at((b - a) * size, self.offset + a * size)
        if len(data) != (b - a) * size:
            raise InputError(self.uri, "index file shrank while being read")
        return np.frombuffer(data, self.dtype).astype(np.int64)

    def search(self, value: int, right: bool = False) -> int:
        """How many entries are below ``value`` (or at most ``value``: ``right``)."""
        lo, hi = 0, self.count
        while hi - lo > BLOCK:
            mid = (lo + hi) // 2
            v = int(self.read(mid, mid + 1)[0])
            if v < value or (right and v == value):
                lo = mid + 1
            else:
                hi = mid
        block = self.read(lo, hi)
        return lo + int(np.searchsorted(block, value, "right" if right else "left"))

    def between(self, lo: int, hi: int) -> tuple[int, np.ndarray]:
        """(index of the first, the entries) of the entries v with lo <= v <= hi."""
        a = self.search(lo)
        b = self.search(hi, right=True)
        values = self.read(a, b) if b > a else np.zeros(0, np.int64)
        if len(values) > 1 and (np.diff(values) < 0).any():
            raise InputError(self.uri, "its index is not in order (a corrupt index?)")
        return a, values


class IndexedFormat(FlatFormat):
    """A raw token file with its documents in an index beside it. Subclasses describe
    the pair and find the document starts of a token range (`doc_starts`)."""

    def reads_doc_sep(self, opts: ReadOptions) -> bool:
        return False  # the index says where documents start

    @abstractmethod
    def doc_starts(self, shard: Shard, lo: int, hi: int, storage: dict[str, Any]) -> np.ndarray:
        """The token positions p, lo <= p <= hi, where documents start (sorted; an empty
        document's start repeats the next one's)."""

    def read(
        self,
        shard: Shard,
        unit: Unit,
        opts: ReadOptions,
        overlap: int,
        scratch: Scratch | None = None,
    ) -> Stream:
        hi = min(unit.stop + overlap, shard.n_items)
        body = read_range(shard, unit.start, hi, scratch, opts.storage)
        starts = self.doc_starts(shard, unit.start, hi, opts.storage)
        own = unit.stop - unit.start
        last = unit.stop == shard.n_items  # documents starting at the end: the last unit's
        documents = int(np.count_nonzero(starts <= unit.stop if last else starts < unit.stop))
        cuts = np.unique(starts - unit.start)
        cuts = cuts[(cuts > 0) & (cuts < len(body))]
        tokens = work_array(scratch, "tokens", len(body) + len(cuts), np.uint32)
        vmin, vmax = place(body, cuts, tokens)
        check_bounds(vmin, vmax, shard.uri)
        return Stream(
            tokens=tokens,
            limit=own + int(np.searchsorted(cuts, own, "right")),
            documents=documents,
            n_tokens=own,
            max_token=int(vmax),
        )

    def raw_values(
        self, shard: Shard, unit: Unit, overlap: int, storage: dict[str, Any] | None
    ) -> np.ndarray | None:
        return None  # documents are not marked in the values: read as a stream

    def tag(self, shard: Shard, unit: Unit, opts: ReadOptions, back: int, match: Match) -> Tagged:
        lo = max(unit.start - back, 0)
        raw = read_range(shard, lo, unit.stop, storage=opts.storage)
        check_range(raw, shard.uri)
        starts = self.doc_starts(shard, lo, unit.stop, opts.storage) - lo
        starts = np.unique(np.concatenate([[0], starts]))
        fid, mlen = match(raw, doc_starts=starts[starts < len(raw)])
        return Tagged(fid[unit.start - lo :], mlen[unit.start - lo :])


def open_beside(shard: Shard, storage: dict[str, Any] | None) -> Any:
    """The shard's index file, open for reads at offsets."""
    fs, path = filesystem(shard.layout["uri"], storage)
    return fs.open_input_file(path)


def beside_path(fs: pafs.FileSystem, path: str, uri: str, name: str) -> tuple[str, str]:
    """(path, uri) of the file ``name`` in the same folder as a shard."""
    return path.rpartition("/")[0] + "/" + name, uri.rpartition("/")[0] + "/" + name


def pair_shard(
    fmt: IndexedFormat,
    fs: pafs.FileSystem,
    at: tuple[str, str, pafs.FileInfo],
    index: tuple[str, str, pafs.FileInfo],
    dtype: np.dtype,
    **layout: int,
) -> Shard:
    """The record of a token file (path, uri, info) and its index: the content checksum
    of both (the flat sample of each), and where the index is."""
    (path, uri, info), (index_path, index_uri, index_info) = at, index
    blocks = flat_blocks(fs, path, info.size) + flat_blocks(fs, index_path, index_info.size)
    return Shard(
        uri=uri,
        format=fmt.name,
        size=info.size,
        mtime=mtime(info),
        dtype=dtype.str,
        n_items=info.size // dtype.itemsize,
        checksum=digest(info.size + index_info.size, blocks),
        layout={"uri": index_uri, "size": index_info.size, **layout},
    )


def index_beside(
    fs: pafs.FileSystem, path: str, uri: str, name: str
) -> tuple[str, str, pafs.FileInfo]:
    """(path, uri, info) of the index ``name`` beside a shard, which must be there."""
    index_path, index_uri = beside_path(fs, path, uri, name)
    with reading(index_uri):
        info = fs.get_file_info(index_path)
    if info.type != pafs.FileType.File:
        raise InputError(uri, f"its index {index_uri} is missing")
    return index_path, index_uri, info
