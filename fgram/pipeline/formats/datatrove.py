"""datatrove / nanotron tokenized files: ``NAME.ds``, raw little-endian tokens, with
``NAME.ds.index`` beside it (uint64, the token position where each document ends) and,
when the writer saved it, ``NAME.ds.metadata`` (``tokenizer|token size`` then the token
count), whose token size is the width (else ``--dtype``). ``NAME.ds.loss`` (a loss mask)
is not read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Exists
from fgram.pipeline.formats.indexed import (
    FileArray,
    IndexedFormat,
    beside_path,
    index_beside,
    open_beside,
    pair_shard,
)
from fgram.pipeline.formats.reading import FLAT_DTYPES, ReadOptions, Shard, reading

WIDTHS = {2: "<u2", 4: "<u4"}  # datatrove's token sizes: "H" and "I"
BESIDE = (".ds.index", ".ds.metadata", ".ds.loss")


class DatatroveFormat(IndexedFormat):
    name = "datatrove"
    extensions: ClassVar[tuple[str, ...]] = (".ds",)
    tag_layout = "<name>.fgid.npy, <name>.mlen.npy aligned with the .ds file's tokens"

    def claims(self, path: str, exists: Exists | None = None) -> bool:
        return path.lower().endswith(".ds")

    def shard_of(self, path: str, exists: Exists | None = None) -> str | None:
        low = path.lower()
        return next((path[: -len(e) + 3] for e in BESIDE if low.endswith(e)), None)

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        name = path.rpartition("/")[2]
        index_path, index_uri, index = found = index_beside(fs, path, uri, name + ".index")
        named = width(fs, *beside_path(fs, path, uri, name + ".metadata"))
        dtype = named or FLAT_DTYPES[opts.dtype]
        if info.size % dtype.itemsize or index.size % 8:
            bad = uri if info.size % dtype.itemsize else index_uri
            raise InputError(bad, f"{info.size if bad == uri else index.size} bytes: truncated?")
        n, docs = info.size // dtype.itemsize, index.size // 8
        with reading(index_uri), fs.open_input_file(index_path) as f:
            ends = FileArray(f, 0, docs, "<u8", index_uri)
            last = int(ends.read(docs - 1, docs)[0]) if docs else 0
        if last != n:
            raise InputError(
                uri,
                f"its index {index_uri} says its documents end at token {last}, the file holds "
                f"{n} {dtype} tokens: cut short, grown, or another width?",
            )
        return pair_shard(self, fs, (path, uri, info), found, dtype, documents=docs)

    def doc_starts(self, shard: Shard, lo: int, hi: int, storage: dict[str, Any]) -> np.ndarray:
        docs, uri = shard.layout["documents"], shard.layout["uri"]
        with reading(uri), open_beside(shard, storage) as f:
            starts = FileArray(f, 0, max(docs - 1, 0), "<u8", uri)  # the last end: no start
            _, ends = starts.between(lo, hi)
        first = [0] if lo == 0 and docs else []
        return np.concatenate([np.asarray(first, np.int64), ends])


def width(fs: pafs.FileSystem, path: str, uri: str) -> np.dtype | None:
    """The token width a ``.ds.metadata`` file names (None when there is none)."""
    with reading(uri):
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as f:
            text = f.read(4096).decode("utf-8", "replace")
    size = text.splitlines()[0].rpartition("|")[2] if text else ""
    if not size.isdigit() or int(size) not in WIDTHS:
        raise InputError(uri, f"names token size {size!r}; known: 2 or 4 bytes")
    return np.dtype(WIDTHS[int(size)])
