"""Parquet token shards: one document per row, a list<integer> column (default
``tokens``). A unit is a run of row groups. Tags: one Parquet file per unit,
``<stem>.<first row group>.parquet``, rows in the input's order, with the input's other
columns (keys such as doc_id), ``fgram_ids`` list<int32> (int64 when the table has
2**31 or more f-grams) and ``match_len`` list<uint8>."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import (
    Match,
    ShardFormat,
    TagFile,
    TagFiles,
    Tagged,
    digest,
    group_ranges,
    mtime,
)
from fgram.pipeline.formats.layouts import FGRAM, HF, TagLayout
from fgram.pipeline.formats.reading import (
    ReadOptions,
    Shard,
    Stream,
    Unit,
    check_range,
    reading,
    short_error,
    stream_from_lists,
)
from fgram.pipeline.formats.table import arrow_list, write_table
from fgram.pipeline.io.storage import Location, filesystem
from fgram.pipeline.kernels.scratch import Scratch


class ParquetFormat(ShardFormat):
    name = "parquet"
    extensions: ClassVar[tuple[str, ...]] = (".parquet", ".pq")
    tag_layout = (
        "<stem>.<first row group>.parquet: input columns but the tokens, "
        "fgram_ids list<int>, match_len list<uint8>"
    )
    listed = (".parquet",)
    layouts: ClassVar[tuple[TagLayout, ...]] = (FGRAM, HF)

    def __init__(self) -> None:
        self.tags: TagFiles = RowTags(self)

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        try:
            with fs.open_input_file(path) as f:
                meta = pq.ParquetFile(f).metadata
                schema = meta.schema.to_arrow_schema()
        except Exception as exc:  # noqa: BLE001
            raise InputError(uri, f"not a readable Parquet file ({short_error(exc)})") from None
        column = token_column(schema, opts.column, uri)
        leaf = [
            i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] == column
        ][0]
        groups = []
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            # a corrupt footer can list fewer columns in a row group than in the schema:
            # Arrow aborts the process on .column() past them, so it is checked first
            if group.num_columns != meta.num_columns:
                raise InputError(
                    uri,
                    f"corrupt Parquet metadata (row group {i} has "
                    f"{group.num_columns} columns, the schema {meta.num_columns})",
                )
            groups.append(group.column(leaf).num_values)
        return Shard(
            uri=uri,
            format=self.name,
            size=info.size,
            mtime=mtime(info),
            n_items=meta.num_rows,
            row_groups=groups,
            checksum=footer_checksum(fs, path, info.size),
            layout={} if column == opts.column else {"column": column},
        )

    def units(self, shard: Shard, most: int) -> list[tuple[int, int]]:
        """Runs of row groups of at most ``most`` tokens (a larger group alone)."""
        return group_ranges(shard.row_groups, most)

    def tokens_in(self, shard: Shard, unit: Unit) -> int:
        return sum(shard.row_groups[unit.start : unit.stop])

    def read(
        self,
        shard: Shard,
        unit: Unit,
        opts: ReadOptions,
        overlap: int,
        scratch: Scratch | None = None,
    ) -> Stream:
        """Whole documents: nothing continues past a unit, so no overlap is read."""
        column = shard.layout.get("column", opts.column)
        with reading(shard.uri):
            table = self.rows(shard, unit, [column], opts.storage)
            lengths, values = list_column(table, column, shard.uri)
            return stream_from_lists(lengths, values, shard.uri, scratch)

    def rows(
        self, shard: Shard, unit: Unit, columns: list[str] | None, storage: dict[str, Any] | None
    ) -> pa.Table:
        """The unit's rows (of ``columns``; None: all)."""
        return read_row_groups(shard, unit, columns, storage)

    def tag(self, shard: Shard, unit: Unit, opts: ReadOptions, back: int, match: Match) -> Tagged:
        column = shard.layout.get("column", opts.column)
        with reading(shard.uri):
            table = self.rows(shard, unit, None, opts.storage)
            lengths, values = list_column(table, column, shard.uri)
        check_range(values, shard.uri)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        fid, mlen = match(values, doc_starts=starts[lengths > 0])
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        return Tagged(fid, mlen, (table.drop_columns([column]), offsets, values))


class RowTags(TagFiles):
    """Tags of row formats: a Parquet file per unit, rows in the input's order, the
    input's other columns kept beside the tags (and in the hf layout its tokens)."""

    def __init__(self, reader: ParquetFormat) -> None:
        self.reader = reader  # the format whose rows the tags are of

    def write(
        self,
        tagged: Tagged,
        shard: Shard,
        unit: Unit,
        staging: Location,
        id_type: np.dtype,
        layout: TagLayout,
    ) -> None:
        out, offsets, values = tagged.rest
        if layout.tokens_beside:  # the tokens beside their tags, as Hugging Face names them
            if "input_ids" in out.column_names:
                raise InputError(
                    shard.uri,
                    "a column input_ids besides the tokens' column: --layout hf "
                    "writes the tokens as input_ids (set --column input_ids, or rename it)",
                )
            wide = len(values) and int(values.max()) >= 2**31
            out = out.append_column(
                "input_ids", arrow_list(offsets, values, np.int64 if wide else np.int32)
            )
        out = out.append_column("fgram_ids", arrow_list(offsets, tagged.fid, id_type))
        out = out.append_column("match_len", arrow_list(offsets, tagged.mlen))
        write_table(out, staging.child("tags", self.file(shard, unit)))

    def read(
        self,
        shard: Shard,
        unit: Unit,
        column: str,
        storage: dict[str, Any] | None,
        where: TagFile,
        layout: TagLayout,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = where(f"tags/{self.file(shard, unit)}")
        t = pq.read_table(f.path, filesystem=f.fs, columns=["fgram_ids", "match_len"])
        column = shard.layout.get("column", column)
        _, tokens = list_column(self.reader.rows(shard, unit, [column], storage), column, shard.uri)
        return (
            tokens.astype(np.int64),
            pc.list_flatten(t.column("fgram_ids")).to_numpy().astype(np.int64),
            pc.list_flatten(t.column("match_len")).to_numpy(),
        )

    def file(self, shard: Shard, unit: Unit) -> str:
        """A unit's tags file: ``<stem>.<first row group>.parquet``."""
        return f"{os.path.splitext(self.reader.tag_name(shard))[0]}.{unit.start:06d}.parquet"


def token_column(schema: pa.Schema, column: str, uri: str) -> str:
    """The column of token lists: ``column`` (``--column``), or ``input_ids`` (Hugging
    Face's name) where the default ``tokens`` is absent; a list of integers."""
    if column not in schema.names and column == "tokens" and "input_ids" in schema.names:
        column = "input_ids"
    if column not in schema.names:
        raise InputError(
            uri, f"no column {column!r} (columns: {', '.join(schema.names)}); set --column"
        )
    typ = schema.field(column).type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_integer(
        typ.value_type
    ):
        raise InputError(uri, f"column {column!r} has type {typ}, expected a list of integers")
    return column


def footer_checksum(fs: pafs.FileSystem, path: str, size: int) -> str:
    """sha256 of a Parquet file's footer (its metadata: every page's offsets, sizes and
    statistics): with size and mtime it tells a file that changed in place."""
    footer = b""
    with fs.open_input_file(path) as f:
        if size >= 12:
            tail = f.read_at(8, size - 8)
            n = min(int.from_bytes(tail[:4], "little"), size - 8)
            footer = f.read_at(n + 8, size - 8 - n)
    return digest(size, [(0, footer)])


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
