"""Arrow IPC files: Hugging Face ``datasets`` saved with ``save_to_disk``
(``data-XXXXX-of-NNNNN.arrow``, the IPC *stream* format, beside ``state.json`` and
``dataset_info.json``; a ``DatasetDict`` a folder per split), and any Arrow stream or
file. One document per row, a list<integer> column (``--column``; ``input_ids`` where
there is no ``tokens``). A unit is a run of record batches.

Planning reads each record batch's header only (its rows and its columns' value counts
are in the message's metadata): a local file through a memory map, a file on an object
store one small read a batch. A unit's batches are read by their byte range (zero-copy
from a local file). Tags: as Parquet's, one Parquet file per unit, named
``<folder>-<stem>.<first batch>.parquet`` (a ``DatasetDict``'s splits hold files of the
same names).
"""

from __future__ import annotations

import itertools
import struct
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Exists, digest, folder_and_name, mtime
from fgram.pipeline.formats.parquet import ParquetFormat, token_column
from fgram.pipeline.formats.reading import ReadOptions, Shard, Unit, reading, short_error
from fgram.pipeline.io.storage import filesystem, locate

FILE_MAGIC = b"ARROW1"
HEAD = 4096  # bytes read at a message's start: its prefix and (almost always) metadata
SCHEMA, DICTIONARY, RECORD_BATCH = 1, 2, 3


class ArrowFormat(ParquetFormat):
    name = "arrow"
    extensions: ClassVar[tuple[str, ...]] = (".arrow",)
    listed = (".arrow",)
    tag_layout = (
        "<folder>-<stem>.<first batch>.parquet: input columns but the tokens, "
        "fgram_ids list<int>, match_len list<uint8>"
    )

    def claims(self, path: str, exists: Exists | None = None) -> bool:
        return path.lower().endswith(".arrow")

    def tag_name(self, shard: Shard) -> str:
        return folder_and_name(shard)

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        with reading(uri), fs.open_input_file(path) as f:
            schema, first, batches, end = walk(f, info.size, uri)
            blocks = [(0, f.read_at(min(HEAD, info.size), 0))]
        column = token_column(schema, opts.column, uri)
        node = node_index(schema, column) + 1  # the list's values
        heads = [(off, rows, nodes[node]) for off, rows, nodes in batches]
        return Shard(
            uri=uri,
            format=self.name,
            size=info.size,
            mtime=mtime(info),
            n_items=sum(rows for _, rows, _ in heads),
            row_groups=[values for _, _, values in heads],
            checksum=digest(info.size, [*blocks, (1, repr(heads).encode())]),
            layout={"column": column, "schema": first},
            spans=spans(batches, end),
        )

    def rows(
        self, shard: Shard, unit: Unit, columns: list[str] | None, storage: dict[str, Any] | None
    ) -> pa.Table:
        at = shard.spans or self._spans(shard, storage)
        lo, hi = at[unit.start], at[unit.stop]
        where = locate(shard.uri, storage)
        with reading(shard.uri):
            if where.local:  # zero-copy: the batches' buffers are the file's pages
                with pa.memory_map(where.path) as source:
                    schema_bytes = source.read_at(shard.layout["schema"], 0)
                    source.seek(lo)
                    body = source.read_buffer(hi - lo)
            else:
                fs, path = filesystem(shard.uri, storage)
                with fs.open_input_file(path) as f:
                    schema_bytes = f.read_at(shard.layout["schema"], 0)
                    body = pa.py_buffer(f.read_at(hi - lo, lo))
            start = len(FILE_MAGIC) + 2 if schema_bytes.startswith(FILE_MAGIC) else 0
            schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes[start:]))
            batches = [
                pa.ipc.read_record_batch(body.slice(a - lo, b - a), schema)
                for a, b in itertools.pairwise(at[unit.start : unit.stop + 1])
            ]
        table = pa.Table.from_batches(batches, schema)
        return table if columns is None else table.select(columns)

    def _spans(self, shard: Shard, storage: dict[str, Any] | None) -> list[int]:
        """The batches' byte offsets (a record read back from a manifest has none)."""
        fs, path = filesystem(shard.uri, storage)
        with reading(shard.uri), fs.open_input_file(path) as f:
            _, _, batches, end = walk(f, shard.size, shard.uri)
        return spans(batches, end)


Batch = tuple[int, int, list[int]]  # a record batch's offset, rows, field nodes' lengths


def spans(batches: list[Batch], end: int) -> list[int]:
    """Each record batch's byte offset, then where the last one ends."""
    return [off for off, _, _ in batches] + [end]


def walk(f: Any, size: int, uri: str) -> tuple[pa.Schema, int, list[Batch], int]:
    """(schema, where the schema message ends, each record batch's (offset, rows, value
    count of each field node), where the last ends) of an Arrow IPC stream (or file),
    from the messages' metadata alone."""
    pos = len(FILE_MAGIC) + 2 if f.read_at(6, 0) == FILE_MAGIC else 0
    schema, first, batches, end = None, 0, [], 0
    while pos + 8 <= size:
        head = f.read_at(min(HEAD, size - pos), pos)
        cont, length = struct.unpack_from("<Ii", head, 0)
        skip = 8 if cont == 0xFFFFFFFF else 4  # before Arrow 0.15: no continuation marker
        if cont != 0xFFFFFFFF:
            length = struct.unpack_from("<i", head, 0)[0]
        if length == 0:
            break  # the end-of-stream marker
        if len(head) < skip + length:
            head = f.read_at(skip + length, pos)
        if len(head) < skip + length:
            raise InputError(uri, f"truncated Arrow stream (a message at byte {pos} is cut)")
        meta = head[skip : skip + length]
        kind, body, rows, nodes = message(meta, uri, pos)
        if kind == SCHEMA:
            try:
                schema = pa.ipc.read_schema(pa.py_buffer(head[: skip + length]))
            except Exception as exc:  # noqa: BLE001
                raise InputError(uri, f"unreadable Arrow schema ({short_error(exc)})") from None
            first = pos + skip + length + body
        elif kind == DICTIONARY:
            raise InputError(uri, "dictionary-encoded Arrow columns are not read")
        elif kind == RECORD_BATCH:
            batches.append((pos, rows, nodes))
            end = pos + skip + length + body
        pos += skip + length + body
    if schema is None:
        raise InputError(uri, "not an Arrow IPC stream (no schema message)")
    if pos > size:
        raise InputError(uri, f"truncated Arrow stream ({size} bytes, its messages need {pos})")
    return schema, first, batches, end or first


def message(meta: bytes, uri: str, pos: int) -> tuple[int, int, int, list[int]]:
    """(header type, body length, rows, field nodes' lengths) of one IPC message's
    flatbuffer (`Message.fbs`: version, header_type, header, bodyLength; a
    RecordBatch: length, nodes)."""
    try:
        root = struct.unpack_from("<I", meta, 0)[0]
        at = field(meta, root, 1)
        kind = meta[at] if at else 0
        at = field(meta, root, 3)
        body = struct.unpack_from("<q", meta, at)[0] if at else 0
        rows, nodes = 0, []
        if kind == RECORD_BATCH:
            h = field(meta, root, 2)
            assert h is not None
            header = h + struct.unpack_from("<I", meta, h)[0]
            at = field(meta, header, 0)
            rows = struct.unpack_from("<q", meta, at)[0] if at else 0
            n = field(meta, header, 1)
            if n:
                vec = n + struct.unpack_from("<I", meta, n)[0]
                count = struct.unpack_from("<I", meta, vec)[0]
                nodes = np.frombuffer(meta, "<i8", 2 * count, vec + 4)[0::2].tolist()
    except (struct.error, AssertionError, ValueError, IndexError):
        raise InputError(uri, f"corrupt Arrow message at byte {pos}") from None
    if body < 0 or rows < 0:
        raise InputError(uri, f"corrupt Arrow message at byte {pos}")
    return kind, body, rows, nodes


def field(buf: bytes, table: int, i: int) -> int | None:
    """Where field ``i`` of the flatbuffer table at ``table`` lies (None: absent)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    size = struct.unpack_from("<H", buf, vtable)[0]
    if 4 + 2 * i >= size:
        return None
    off = struct.unpack_from("<H", buf, vtable + 4 + 2 * i)[0]
    return table + off if off else None


def node_index(schema: pa.Schema, column: str) -> int:
    """The index of a top-level column's field node (nodes run depth-first)."""

    def nodes(t: pa.DataType) -> int:
        return 1 + sum(nodes(t.field(i).type) for i in range(t.num_fields))

    at = 0
    for f in schema:
        if f.name == column:
            return at
        at += nodes(f.type)
    raise KeyError(column)
