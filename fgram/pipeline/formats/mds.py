"""MosaicML Streaming (llm-foundry) MDS datasets: ``shard.NNNNN.mds`` files, or
``shard.NNNNN.mds.zstd`` compressed, listed by ``index.json`` beside them (each
shard's columns, their encodings and sizes, its samples, raw and compressed bytes).

A sample holds a ``uint32`` size for each column of no fixed size, then the columns'
bytes in the index's order. The tokens' column (``--column``; ``input_ids`` where there
is no ``tokens``) is ``ndarray`` (its dtype and shape in the encoding, e.g.
``ndarray:int32``, or before the values in each sample: a dtype byte, an ``ndim |
shape width`` byte and the shape) or, as older llm-foundry wrote, ``bytes`` of int64.
Samples are one stream through the shards in the index's order (``concat_tokens``
windows; documents end at ``--doc-sep``), or each a document
(``--samples-are-documents``). Compressions other than zstd, float tokens and other
encodings are refused.
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
from fgram.pipeline.kernels.streams import segments

INDEX = "index.json"
INTS = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")
CODES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 32: "uint32", 33: "int32"}
CODES |= {64: "uint64", 65: "int64"}  # NDArray's value dtype codes (floats: refused)


class MdsFormat(SampleFormat):
    name = "mds"
    extensions: ClassVar[tuple[str, ...]] = (".mds", ".mds.zstd")
    listed = (".mds",)
    linked = True
    tag_layout = (
        "<folder>-<file>.<first group>.parquet: sample (its index in the file), "
        "fgram_ids list<int>, match_len list<uint8>"
    )

    def shard_of(self, path: str, exists: Exists | None = None) -> str | None:
        """A compressed shard beside its decompressed copy: read as that."""
        raw = path[:-5]
        if path.lower().endswith(".mds.zstd") and exists is not None and exists(raw):
            return raw
        return None

    def entry(self, fs: pafs.FileSystem, path: str, uri: str, opts: ReadOptions) -> dict[str, Any]:
        index_path, index_uri = beside_path(fs, path, uri, INDEX)
        shards = load_index(fs, index_path, index_uri)
        name = path.rpartition("/")[2]
        found = [
            i
            for i, sh in enumerate(shards)
            if name in ((sh.get(k) or {}).get("basename") for k in ("raw_data", "zip_data"))
        ]
        if not found:
            raise InputError(uri, f"not listed in its {index_uri}")
        position = found[0]
        sh = shards[position]
        raw, zipped = sh.get("raw_data") or {}, sh.get("zip_data") or {}
        if sh.get("format") != "mds":
            raise InputError(uri, f"its index says format {sh.get('format')!r}, not mds")
        compression = None
        if name == zipped.get("basename") and name != raw.get("basename"):
            compression = str(sh.get("compression") or "").split(":")[0]
            if compression != "zstd":
                raise InputError(uri, f"compressed with {compression!r}; fgram reads zstd")
        column, codec = mds_codec(sh, opts.column, uri)
        return {
            "position": position,
            "samples": int(sh["samples"]),
            "raw": int(raw["bytes"]),
            "compression": compression,
            "column": column,
            "codec": codec,
            "dtype": np.dtype(codec["dtype"] or "int64").str,
            "index": index_uri,
            "least": int(sh["samples"]) if codec["kind"] == "ndarray" else 0,  # never empty
        }

    def estimate(self, sizes: np.ndarray, part: Part) -> np.ndarray:
        """At least the tokens a sample holds (the least overhead taken off: a file
        estimated empty is empty)."""
        c = part["codec"]
        width = np.dtype(part["dtype"]).itemsize
        fixed = 4 * c["nvar"] + sum(s for s, _ in c["before"] if s is not None)
        fixed += (c["dtype"] is None) + (0 if c["shape"] else 2) * (c["kind"] == "ndarray")
        return np.asarray(np.maximum(sizes - fixed, 0) // width)  # never fewer than held

    def decode(
        self, buf: np.ndarray, offsets: np.ndarray, part: Part
    ) -> tuple[np.ndarray, np.ndarray]:
        c, uri = part["codec"], part["uri"]
        starts = offsets[:-1]
        at = starts + 4 * c["nvar"]
        for size, slot in c["before"]:
            at = at + (size if size is not None else u32(buf, starts + 4 * slot, uri))
        end = at + (c["fixed"] if c["fixed"] is not None else u32(buf, starts + 4 * c["slot"], uri))
        if (end > offsets[1:]).any():
            raise InputError(uri, "a sample's columns run past its end (corrupt?)")
        dtype = c["dtype"]
        if c["kind"] == "ndarray" and dtype is None:
            codes = np.unique(byte(buf, at, uri))
            if len(codes) > 1 or (len(codes) and int(codes[0]) not in CODES):
                raise InputError(uri, f"token arrays of dtype codes {codes.tolist()}; known: ints")
            dtype = CODES[int(codes[0])] if len(codes) else "int64"
            at = at + 1
        if c["kind"] == "ndarray" and not c["shape"]:
            b = byte(buf, at, uri).astype(np.int64)
            at = at + 1 + (b >> 2) * (1 << (b & 3))
        width = np.dtype(dtype or "int64").itemsize
        sizes = end - at
        if (sizes < 0).any() or (sizes % width).any():
            raise InputError(uri, f"a sample's tokens are not whole {dtype} values (corrupt?)")
        out = np.empty(int(sizes.sum()), np.uint8)
        segments(buf, at.astype(np.int64), sizes.astype(np.int64), out)
        return sizes // width, out.view(np.dtype(dtype or "int64").newbyteorder("<"))


def load_index(fs: pafs.FileSystem, path: str, uri: str) -> list[dict[str, Any]]:
    """The shards an MDS ``index.json`` lists, each of which must be in its folder."""
    doc, there = read_index(fs, path, uri)
    shards = doc.get("shards") if isinstance(doc, dict) else None
    if not isinstance(shards, list):
        raise InputError(uri, "not an MDS index (no list of shards)")
    for sh in shards:
        names = [(sh.get(k) or {}).get("basename") for k in ("raw_data", "zip_data")]
        if not any(n and n.rpartition("/")[2] in there for n in names):
            raise InputError(uri, f"lists {names[0]}, which is missing")
    return shards


def mds_codec(sh: dict[str, Any], column: str, uri: str) -> tuple[str, dict[str, Any]]:
    """The tokens' column and how a sample holds it."""
    names, encodings, sizes = sh["column_names"], sh["column_encodings"], sh["column_sizes"]
    if column not in names and column == "tokens" and "input_ids" in names:
        column = "input_ids"
    if column not in names:
        raise InputError(uri, f"no column {column!r} (columns: {', '.join(names)}); set --column")
    col = names.index(column)
    slots = np.cumsum([s is None for s in sizes]) - 1  # a column's size's place in a sample
    kind, _, rest = encodings[col].partition(":")
    dtype, _, shape = rest.partition(":")
    if kind == "bytes":
        dtype = "int64"  # llm-foundry's tokens as bytes
    elif kind != "ndarray" or dtype and dtype not in INTS:
        raise InputError(
            uri, f"column {column!r} is {encodings[col]}; fgram reads ndarray of ints or bytes"
        )
    codec = {
        "kind": kind,
        "dtype": dtype or None,
        "shape": bool(shape),
        "nvar": int(sum(s is None for s in sizes)),
        "before": [[sizes[j], int(slots[j])] for j in range(col)],
        "fixed": sizes[col],
        "slot": int(slots[col]) if sizes[col] is None else None,
    }
    return column, codec


def byte(buf: np.ndarray, at: np.ndarray, uri: str) -> np.ndarray:
    """The bytes at positions ``at`` (each inside the buffer)."""
    if len(at) and (at.max() >= len(buf) or at.min() < 0):
        raise InputError(uri, "a sample is cut short (corrupt?)")
    return np.asarray(buf[at])


def u32(buf: np.ndarray, at: np.ndarray, uri: str) -> np.ndarray:
    """The little-endian uint32 values at byte positions ``at`` (any alignment)."""
    parts = [byte(buf, at + i, uri).astype(np.int64) << (8 * i) for i in range(4)]
    return np.asarray(parts[0] | parts[1] | parts[2] | parts[3], np.int64)
