"""Raw text in: the formats LLM corpora ship, planned into units and read as documents.

Formats (by name; a compressed file is streamed, never held whole in memory):

- JSON Lines: ``.jsonl``/``.json``/``.ndjson``, plain, gzip (``.gz``) or zstd (``.zst``;
  a bare ``.zst`` is JSON Lines too: Dolma, RedPajama, The Pile). One document per
  non-blank line, its text at ``text_field`` (a dotted path for nested fields).
- Parquet (``.parquet``/``.pq``, FineWeb, Hugging Face datasets): one document per row,
  a string column ``text_field``.
- Plain text (``.txt``, plain, ``.gz`` or ``.zst``): one document per file, or one per
  non-blank line (``doc_per_line``).

A *unit* is the work of one task: a byte range of an uncompressed line-per-document file
(it owns the lines that start inside it), a range of row groups of a Parquet file, or a
whole file. Counting a unit's documents reads it without parsing (blank lines are no
documents), so document ids and rows are known before anything is tokenized.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from .errors import ConfigError, InputError
from .inputs import discover, even_ranges, group_ranges
from .reading import reading
from .storage import filesystem

JSONL = (".jsonl", ".json", ".ndjson")
TEXT = (".txt",)
PARQUET = (".parquet", ".pq")
COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
BLOCK = 1 << 20  # bytes read at a time past a range's end, to finish its last line


@dataclass
class TextOptions:
    text_field: str = "text"  # a JSON key (dotted: nested) or a Parquet column
    id_field: str | None = None  # kept beside the tokens as the document's id
    doc_per_line: bool = False  # .txt: a document per non-blank line, not per file
    storage: dict[str, Any] = field(default_factory=dict)


@dataclass
class TextFile:
    uri: str
    kind: str  # "jsonl" | "parquet" | "txt"
    compression: str | None  # None | "gzip" | "zstd"
    size: int
    mtime: float | None
    row_groups: list[int] = field(default_factory=list)  # Parquet: rows per row group

    def record(self) -> dict[str, Any]:
        rec = asdict(self)
        rec.pop("row_groups")
        return rec


@dataclass
class TextUnit:
    file: int  # index into the file list
    start: int  # a byte offset, or (Parquet) a row group
    stop: int


def text_kind(name: str) -> tuple[str, str | None] | None:
    """(kind, compression) of a file name, None for one that holds no text fgram reads."""
    low = os.path.basename(name).lower()
    stem, ext = os.path.splitext(low)
    compression = COMPRESSION.get(ext)
    if compression is not None:
        if stem.endswith(JSONL + TEXT):
            return ("txt" if stem.endswith(TEXT) else "jsonl"), compression
        return ("jsonl", compression) if compression == "zstd" else None
    if low.endswith(JSONL):
        return "jsonl", None
    if low.endswith(TEXT):
        return "txt", None
    if low.endswith(PARQUET):
        return "parquet", None
    return None


TEXT_FILES = "text files (.jsonl[.gz|.zst], .parquet, .txt)"


def is_text_file(name: str) -> bool:
    """Whether a file in an input folder is text fgram reads (by its name)."""
    return text_kind(name) is not None


def plan_text(paths: list[str], opts: TextOptions) -> list[TextFile]:
    """Discover and check every input file (metadata only: no document is read)."""
    files = []
    found = discover(paths, opts.storage, is_text_file, TEXT_FILES)
    for fs, path, uri in found:
        kind = text_kind(path)
        if kind is None:
            raise InputError(
                uri, "unknown format (expected .jsonl, .jsonl.gz, .jsonl.zst, .parquet or .txt)"
            )
        with reading(uri):
            info = fs.get_file_info(path)
            groups: list[int] = []
            if kind[0] == "parquet":
                with fs.open_input_file(path) as f:
                    meta = pq.ParquetFile(f).metadata
                    names = meta.schema.to_arrow_schema().names
                    if opts.text_field not in names:
                        raise InputError(uri, f"no column {opts.text_field!r} (has {names})")
                    groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        files.append(TextFile(uri, kind[0], kind[1], int(info.size or 0), mtime, groups))
    return files


def _splittable(f: TextFile, opts: TextOptions) -> bool:
    return f.compression is None and (f.kind == "jsonl" or (f.kind == "txt" and opts.doc_per_line))


def plan_text_units(files: list[TextFile], opts: TextOptions, unit_bytes: int) -> list[TextUnit]:
    """Units of about ``unit_bytes`` input bytes: byte ranges of uncompressed JSON Lines
    (and line-per-document text), row-group ranges of Parquet (rows weighed at the file's
    bytes per row), every other file whole."""
    if unit_bytes < 1:
        raise ConfigError(f"the unit size must be positive, got {unit_bytes}")
    units: list[TextUnit] = []
    for i, f in enumerate(files):
        if _splittable(f, opts) and f.size > unit_bytes:
            units.extend(TextUnit(i, a, b) for a, b in even_ranges(f.size, unit_bytes))
        elif f.kind == "parquet":
            per_unit = max(1, unit_bytes * max(sum(f.row_groups), 1) // max(f.size, 1))
            units.extend(TextUnit(i, a, b) for a, b in group_ranges(f.row_groups, per_unit))
        else:
            units.append(TextUnit(i, 0, f.size))
    return units


def _open(f: TextFile, storage: dict[str, Any] | None) -> tuple[pafs.FileSystem, str]:
    return filesystem(f.uri, storage)


def _stream(f: TextFile, storage: dict[str, Any] | None) -> IO[bytes]:
    """A whole (maybe compressed) file as a byte stream, decompressed as it is read."""
    fs, path = _open(f, storage)
    raw = fs.open_input_stream(path, compression=None)  # decompressed here, not by extension
    if f.compression == "gzip":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw))
    if f.compression == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return cast(IO[bytes], io.BufferedReader(reader, BLOCK))
    return cast(IO[bytes], raw)


def _range_bytes(f: TextFile, unit: TextUnit, storage: dict[str, Any] | None) -> bytes:
    """The bytes of the lines that start in the unit's range: from the first line start at
    or after ``start`` to the end of the line that holds byte ``stop - 1``."""
    fs, path = _open(f, storage)
    with fs.open_input_file(path) as src:
        lo = max(unit.start - 1, 0)
        data: bytes = src.read_at(unit.stop - lo, lo)
        if unit.stop < f.size and not data.endswith(b"\n"):
            tail = []
            at = unit.stop
            while at < f.size:
                block = src.read_at(min(BLOCK, f.size - at), at)
                cut = block.find(b"\n")
                if cut >= 0:
                    tail.append(block[: cut + 1])
                    break
                tail.append(block)
                at += len(block)
            data += b"".join(tail)
    if unit.start > 0:  # the line under way at ``start`` belongs to the unit before
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
    return data


def _lines(f: TextFile, unit: TextUnit, storage: dict[str, Any] | None) -> Iterator[bytes]:
    """A line-per-document unit's non-blank lines."""
    if f.compression is None:
        lines: Iterator[bytes] = iter(_range_bytes(f, unit, storage).split(b"\n"))
    else:
        lines = iter(_stream(f, storage))
    for line in lines:
        if line.strip():
            yield line


def count_documents(f: TextFile, unit: TextUnit, opts: TextOptions) -> int:
    """How many documents a unit holds (no parsing: non-blank lines, rows, or one)."""
    with reading(f.uri):
        if f.kind == "parquet":
            return sum(f.row_groups[unit.start : unit.stop])
        if f.kind == "txt" and not opts.doc_per_line:
            return 1
        return sum(1 for _ in _lines(f, unit, opts.storage))


def _field(obj: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _decode(data: bytes, uri: str, row: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(uri, f"row {row}: not UTF-8 text (byte {exc.start})") from None


def documents(
    f: TextFile, unit: TextUnit, opts: TextOptions, first_row: int, batch: int = 1024
) -> Iterator[tuple[list[str], list[str] | None]]:
    """A unit's documents in batches: (texts, ids or None). ``first_row``: the file row
    of the unit's first document (named in errors)."""
    text_path = opts.text_field.split(".")
    id_path = opts.id_field.split(".") if opts.id_field else None
    texts: list[str] = []
    ids: list[str] | None = [] if id_path else None
    with reading(f.uri):
        if f.kind == "parquet":
            yield from _parquet_documents(f, unit, opts, batch)
            return
        if f.kind == "txt" and not opts.doc_per_line:
            stream = _stream(f, opts.storage)
            yield [_decode(stream.read(), f.uri, 0)], None
            return
        for row, line in enumerate(_lines(f, unit, opts.storage), first_row):
            if f.kind == "txt":
                texts.append(_decode(line.rstrip(b"\r\n"), f.uri, row))
            else:
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise InputError(f.uri, f"row {row}: not JSON ({exc})") from None
                text = _field(obj, text_path)
                if not isinstance(text, str):
                    what = "no" if text is None else "a non-string"
                    raise InputError(f.uri, f"row {row}: {what} field {opts.text_field!r}")
                texts.append(text)
                if ids is not None and id_path is not None:
                    ids.append(str(_field(obj, id_path)))
            if len(texts) >= batch:
                yield texts, ids
                texts, ids = [], ([] if id_path else None)
    if texts:
        yield texts, ids


def _parquet_documents(
    f: TextFile, unit: TextUnit, opts: TextOptions, batch: int
) -> Iterator[tuple[list[str], list[str] | None]]:
    fs, path = _open(f, opts.storage)
    columns = [opts.text_field] + ([opts.id_field] if opts.id_field else [])
    with fs.open_input_file(path) as src:
        pf = pq.ParquetFile(src)
        for g in range(unit.start, unit.stop):
            table = pf.read_row_group(g, columns=columns)
            text = table.column(opts.text_field)
            if not pa.types.is_string(text.type) and not pa.types.is_large_string(text.type):
                raise InputError(f.uri, f"column {opts.text_field!r} is {text.type}, not text")
            if text.null_count:
                raise InputError(f.uri, f"a null in column {opts.text_field!r}")
            values = text.to_pylist()
            keys = (
                [str(v) for v in table.column(opts.id_field).to_pylist()] if opts.id_field else None
            )
            for at in range(0, len(values), batch):
                yield values[at : at + batch], (keys[at : at + batch] if keys else None)
