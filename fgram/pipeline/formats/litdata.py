"""LitData (litgpt) optimized datasets written with ``TokensLoader``: ``chunk-R-I.bin``
files (``chunk-R-I.zstd.bin`` compressed) listed by ``index.json`` beside them, whose
``config`` names the items' ``data_format``: ``no_header_tensor:D`` or
``no_header_numpy:D``, raw token values of the dtype D codes. A chunk is a ``uint32``
item count, ``uint32`` offsets, then the items' tokens back to back.

Items are one stream within a chunk (documents end at ``--doc-sep``; ``TokensLoader``
reads its blocks within a chunk, so a chunk's end ends a document), or each a document
(``--samples-are-documents``). Other data formats (pytrees, headers), encryption and
per-item compression are refused.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Exists
from fgram.pipeline.formats.indexed import beside_path
from fgram.pipeline.formats.reading import ReadOptions
from fgram.pipeline.formats.samples import Part, SampleFormat, read_index

INDEX = "index.json"
TORCH = {11: "uint8", 12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32"}
TORCH |= {17: "int64", 18: "int64", 20: "uint16"}  # litdata's torch dtype codes (ints)
NUMPY = {0: "int8", 1: "int16", 2: "int32", 3: "int64", 4: "uint8", 5: "uint16"}
NUMPY |= {6: "uint32", 7: "uint64"}  # and its numpy ones
KINDS = {"no_header_tensor": TORCH, "no_header_numpy": NUMPY}


class LitdataFormat(SampleFormat):
    name = "litdata"
    extensions: ClassVar[tuple[str, ...]] = (".bin",)
    listed = (".bin",)
    tag_layout = (
        "<folder>-<file>.<first group>.parquet: sample (the item's index in the chunk), "
        "fgram_ids list<int>, match_len list<uint8>"
    )

    def claims(self, path: str, exists: Exists | None = None) -> bool:
        """``chunk-*.bin`` with an ``index.json`` beside it (else a flat file)."""
        name = path.rpartition("/")[2].lower()
        if not (name.startswith("chunk-") and name.endswith(".bin")) or exists is None:
            return False
        return exists(path.rpartition("/")[0] + "/" + INDEX)

    def entry(self, fs: pafs.FileSystem, path: str, uri: str, opts: ReadOptions) -> dict[str, Any]:
        index_path, index_uri = beside_path(fs, path, uri, INDEX)
        doc, there = read_index(fs, index_path, index_uri)
        chunks = doc.get("chunks") if isinstance(doc, dict) else None
        config = doc.get("config") if isinstance(doc, dict) else None
        if not isinstance(chunks, list) or not isinstance(config, dict):
            raise InputError(index_uri, "not a LitData index (no chunks and config)")
        for c in chunks:
            if c.get("filename") not in there:
                raise InputError(index_uri, f"lists {c.get('filename')}, which is missing")
        name = path.rpartition("/")[2]
        position = next((i for i, c in enumerate(chunks) if c.get("filename") == name), None)
        if position is None:
            raise InputError(uri, f"not listed in its {index_uri}")
        chunk = chunks[position]
        return {
            "position": position,
            "samples": int(chunk["chunk_size"]),
            "raw": int(chunk["chunk_bytes"]),
            "compression": compression(config, name, uri),
            "column": "tokens",
            "codec": {"dim": chunk.get("dim")},
            "dtype": np.dtype(item_dtype(config, uri)).str,
            "index": index_uri,
        }

    def verify(self, offsets: np.ndarray, part: Part) -> None:
        dim, width = part["codec"]["dim"], np.dtype(part["dtype"]).itemsize
        if dim is not None and offsets[-1] - offsets[0] != dim * width:
            held = (offsets[-1] - offsets[0]) / width
            raise InputError(part["uri"], f"holds {held:g} tokens, its index says {dim}")

    def estimate(self, sizes: np.ndarray, part: Part) -> np.ndarray:
        return sizes // np.dtype(part["dtype"]).itemsize

    def decode(
        self, buf: np.ndarray, offsets: np.ndarray, part: Part
    ) -> tuple[np.ndarray, np.ndarray]:
        dtype = np.dtype(part["dtype"])
        sizes = np.diff(offsets)
        if (sizes % dtype.itemsize).any():
            raise InputError(part["uri"], f"an item's bytes are not whole {dtype} values")
        values = buf[offsets[0] : offsets[-1]].view(dtype)
        return sizes // dtype.itemsize, values


def item_dtype(config: dict[str, Any], uri: str) -> str:
    """The tokens' dtype its ``data_format`` names (one raw tensor or array an item)."""
    formats = config.get("data_format") or []
    kind, _, code = str(formats[0] if len(formats) == 1 else formats).partition(":")
    table = KINDS.get(kind)
    if table is None or not code.isdigit() or int(code) not in table:
        raise InputError(
            uri,
            f"items of data format {formats}; fgram reads TokensLoader chunks "
            "(no_header_tensor or no_header_numpy of an integer dtype)",
        )
    if config.get("encryption"):
        raise InputError(uri, "its chunks are encrypted")
    return table[int(code)]


def compression(config: dict[str, Any], name: str, uri: str) -> str | None:
    """How a chunk file is compressed: None, or zstd as a whole."""
    codec = str(config.get("compression") or "")
    if config.get("compression_level") not in (None, "chunk"):
        raise InputError(
            uri, f"compressed by {config['compression_level']}; fgram reads whole-file zstd"
        )
    if not codec or ".zstd" not in name:
        return None
    if codec.split(":")[0] != "zstd":
        raise InputError(uri, f"compressed with {codec!r}; fgram reads zstd")
    return "zstd"
