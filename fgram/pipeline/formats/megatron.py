"""Megatron-LM / NeMo / GPT-NeoX indexed datasets (``IndexedDataset``; written by their
preprocessing tools, datatrove and NeMo Curator): ``PREFIX.bin``, the raw tokens of
every sequence one after another, and ``PREFIX.idx`` beside it.

The ``.idx``: 9 bytes ``MMIDIDX\\x00\\x00``, ``<Q`` version (1), ``<B`` dtype code, ``<Q``
sequence count S, ``<Q`` document-index count D; then S int32 sequence lengths, S int64
byte pointers into the ``.bin``, D int64 document indices (the sequence where each
document starts, beginning with 0 and ending with S) and, when multimodal, S int8
modes. A document is a run of sequences, read as one stream: no n-gram is lost where a
sequence ends inside a document. The dtype is the index's; an end-of-document token is
there only when the writer appended one (it is then a token like any other).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Exists, TagFiles
from fgram.pipeline.formats.flat import SidecarTags, sidecar
from fgram.pipeline.formats.indexed import (
    FileArray,
    IndexedFormat,
    index_beside,
    open_beside,
    pair_shard,
)
from fgram.pipeline.formats.layouts import FGRAM, MEGATRON, OLMO, TagLayout
from fgram.pipeline.formats.reading import ReadOptions, Shard, reading
from fgram.pipeline.io.storage import Location, filesystem

MAGIC = b"MMIDIDX\x00\x00"
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, documents + 1
CODES: dict[int, str] = {1: "|u1", 2: "|i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}
FLOATS = {6: "float64", 7: "float32"}


class MegatronFormat(IndexedFormat):
    name = "megatron"
    extensions: ClassVar[tuple[str, ...]] = (".bin",)
    listed = (".idx",)
    tag_layout = "<name>.fgid.npy, <name>.mlen.npy aligned with the .bin's tokens"
    layouts: ClassVar[tuple[TagLayout, ...]] = (FGRAM, OLMO, MEGATRON)

    def __init__(self) -> None:
        self.tags: TagFiles = MegatronTags()

    def claims(self, path: str, exists: Exists | None = None) -> bool:
        return path.lower().endswith(".bin") and exists is not None and exists(path[:-4] + ".idx")

    def shard_of(self, path: str, exists: Exists | None = None) -> str | None:
        return path[:-4] + ".bin" if path.lower().endswith(".idx") else None

    def from_prefix(self, path: str) -> list[str]:
        return [path + ".bin", path + ".idx"]

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        index = index_beside(fs, path, uri, path.rpartition("/")[2][:-4] + ".idx")
        idx_path, idx_uri, idx = index
        with reading(idx_uri), fs.open_input_file(idx_path) as f:
            dtype, sequences, entries = read_header(f.read_at(HEADER.size, 0), idx.size, idx_uri)
            lengths = FileArray(f, HEADER.size, sequences, "<i4", idx_uri)
            pointers = FileArray(f, HEADER.size + 4 * sequences, sequences, "<i8", idx_uri)
            documents = FileArray(f, HEADER.size + 12 * sequences, entries, "<i8", idx_uri)
            ends = (
                int(pointers.read(sequences - 1, sequences)[0])
                + int(lengths.read(sequences - 1, sequences)[0]) * dtype.itemsize
                if sequences
                else 0
            )
            first, last = documents.read(0, 1)[0], documents.read(entries - 1, entries)[0]
            start = int(pointers.read(0, 1)[0]) if sequences else 0
        if (first, last) != (0, sequences):
            raise InputError(
                idx_uri,
                f"its document indices run from {first} to {last}, not 0 to its {sequences} "
                "sequences (a corrupt index?)",
            )
        if ends != info.size or start != 0:
            raise InputError(
                uri,
                f"its index {idx_uri} says its sequences end at byte {ends}, the file holds "
                f"{info.size}: cut short, grown, or not this index's?",
            )
        at = (path, uri, info)
        return pair_shard(self, fs, at, index, dtype, sequences=sequences, entries=entries)

    def doc_starts(self, shard: Shard, lo: int, hi: int, storage: dict[str, Any]) -> np.ndarray:
        item = np.dtype(shard.dtype).itemsize
        s, uri = shard.layout["sequences"], shard.layout["uri"]
        with reading(uri), open_beside(shard, storage) as f:
            pointers = FileArray(f, HEADER.size + 4 * s, s, "<i8", uri)
            first, at = pointers.between(lo * item, hi * item)
            if hi >= shard.n_items:  # sequence S: the end, where trailing empty ones start
                at = np.append(at, shard.n_items * item)
            if not len(at):
                return np.zeros(0, np.int64)
            entries = FileArray(f, HEADER.size + 12 * s, shard.layout["entries"] - 1, "<i8", uri)
            _, seqs = entries.between(first, first + len(at) - 1)
            lengths = FileArray(f, HEADER.size, s, "<i4", uri).read(first, first + len(at) - 1)
        if (np.diff(at) != lengths * item).any():
            raise InputError(uri, "its sequence pointers and lengths disagree (a corrupt index?)")
        return np.asarray(at[seqs - first] // item, np.int64)


class MegatronTags(SidecarTags):
    """Flat tags, and in the megatron layout an IndexedDataset index beside each."""

    def index(
        self, shard: Shard, staging: Location, id_type: np.dtype, layout: TagLayout, storage: Any
    ) -> None:
        """In the megatron layout: an ``.idx`` beside each raw tags file (``<prefix>.fgid``,
        ``<prefix>.mlen``), the input's own with its dtype code and byte pointers for the
        tags' width, so that Megatron's ``IndexedDataset`` reads them as it reads the
        tokens."""
        if not layout.indexed:
            return
        uri = shard.layout["uri"]
        fs, path = filesystem(uri, storage)
        with reading(uri), fs.open_input_file(path) as f:
            idx = f.read()
        s = shard.layout["sequences"]
        item = np.dtype(shard.dtype).itemsize
        pointers = np.frombuffer(idx, "<i8", s, HEADER.size + 4 * s)
        for what, dtype in (("fgid", id_type), ("mlen", np.dtype(np.uint8))):
            code = next(c for c, d in CODES.items() if np.dtype(d) == dtype.newbyteorder("<"))
            _, version, _, sequences, entries = HEADER.unpack(idx[: HEADER.size])
            head = HEADER.pack(MAGIC, version, code, sequences, entries)
            moved = (pointers // item * dtype.itemsize).astype("<i8").tobytes()
            body = idx[HEADER.size : HEADER.size + 4 * s] + moved + idx[HEADER.size + 12 * s :]
            data = sidecar(shard, what, layout)  # <prefix>.<what>.bin
            staging.child("tags", data[: -len(".bin")] + ".idx").write_bytes(head + body)


def read_header(head: bytes, size: int, uri: str) -> tuple[np.dtype, int, int]:
    """(dtype, sequences, document-index entries) of an ``.idx``, whose size must be
    what they make (a truncated index is an error naming it)."""
    if len(head) < HEADER.size or not head.startswith(MAGIC):
        raise InputError(uri, "not a Megatron IndexedDataset index (no MMIDIDX magic)")
    _, version, code, sequences, entries = HEADER.unpack(head)
    if version != 1:
        raise InputError(uri, f"IndexedDataset index version {version}; known: 1")
    if code in FLOATS:
        raise InputError(uri, f"its tokens are {FLOATS[code]} (dtype code {code}), not integers")
    if code not in CODES:
        raise InputError(uri, f"unknown dtype code {code} (known: {sorted(CODES)})")
    want = HEADER.size + 12 * sequences + 8 * entries
    if size not in (want, want + sequences) or entries < 1:
        raise InputError(
            uri,
            f"{size} bytes, its header ({sequences} sequences, {entries} document indices) "
            f"makes {want}: truncated?",
        )
    return np.dtype(CODES[code]), sequences, entries
