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
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fgram.pipeline.errors import ConfigError, InputError
from fgram.pipeline.formats.base import even_ranges, group_ranges
from fgram.pipeline.formats.inputs import discover
from fgram.pipeline.formats.names import TEXT_FILES, is_text_file, text_kind
from fgram.pipeline.formats.reading import reading
from fgram.pipeline.io.storage import filesystem

BLOCK = 1 << 20  # bytes read at a time past a range's end, to finish its last line


@dataclass
class TextOptions:
    text_field: str = "text"  # a JSON key (dotted: nested) or a Parquet column
    id_field: str | None = None  # kept beside the tokens as the document's id
    doc_per_line: bool = False  # .txt: a document per non-blank line, not per file
    skip_bad_records: bool = False  # count a bad record and go on, instead of failing
    storage: dict[str, Any] = field(default_factory=dict)
    # a record (a JSON line, a .txt document) past this many bytes is a bad record: the
    # tokenizer holds tens of times a document's size while it encodes it
    max_record_bytes: int = 32 * 2**20


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


def _chunks(f: TextFile, storage: dict[str, Any] | None) -> Iterator[bytes]:
    """A whole (maybe compressed) file's bytes, decompressed as they are read, in chunks;
    a truncated archive is an error, not a shorter file."""
    fs, path = _open(f, storage)
    with fs.open_input_stream(path, compression=None) as raw:  # not by its extension
        if f.compression == "gzip":
            src: Any = gzip.GzipFile(fileobj=raw)  # raises EOFError when cut short
            while block := src.read(BLOCK):
                yield block
            return
        if f.compression != "zstd":
            while block := raw.read(BLOCK):
                yield block
            return
        import zstandard

        dec, fed = zstandard.ZstdDecompressor().decompressobj(), False
        while data := raw.read(BLOCK):
            while data:
                out = dec.decompress(data)
                fed = True
                if out:
                    yield out
                data = dec.unused_data if dec.eof else b""
                if dec.eof:  # the next frame (a file may hold several)
                    dec, fed = zstandard.ZstdDecompressor().decompressobj(), False
        if fed:
            raise InputError(f.uri, "the zstd stream ends inside a frame (a truncated file)")


def _chunk_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a chunked byte stream (without their ``\\n``), the last one even
    when the stream does not end with one."""
    rest = b""
    for chunk in chunks:
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


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


def _all_lines(f: TextFile, unit: TextUnit, storage: dict[str, Any] | None) -> Iterator[bytes]:
    """A line-per-document unit's lines, blank ones too (without their ``\\n``)."""
    if f.compression is not None:
        yield from _chunk_lines(_chunks(f, storage))
        return
    lines = _range_bytes(f, unit, storage).split(b"\n")
    if lines[-1] == b"":  # after the last newline: no line
        lines.pop()
    yield from lines


def _lines(
    f: TextFile, unit: TextUnit, storage: dict[str, Any] | None
) -> Iterator[tuple[int, bytes]]:
    """A line-per-document unit's non-blank lines, with their line numbers from 0 (the
    unit's first line)."""
    for n, line in enumerate(_all_lines(f, unit, storage)):
        if line.strip():
            yield n, line


def count_documents(f: TextFile, unit: TextUnit, opts: TextOptions) -> tuple[int, int]:
    """How many documents (no parsing: non-blank lines, rows, or one) and lines a unit
    holds, in one read."""
    with reading(f.uri):
        if f.kind == "parquet":
            return sum(f.row_groups[unit.start : unit.stop]), 0
        if f.kind == "txt" and not opts.doc_per_line:
            return 1, 0
        docs = lines = 0
        for line in _all_lines(f, unit, opts.storage):
            lines += 1
            docs += bool(line.strip())
        return docs, lines


def _field(obj: Any, path: list[str]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


@dataclass
class Batch:
    """Documents of a unit: their texts, their places among the unit's documents (a
    skipped record leaves its place out), and their ids (``id_field``)."""

    texts: list[str] = field(default_factory=list)
    places: list[int] = field(default_factory=list)
    ids: list[str] | None = None


class Skips:
    """Bad records passed over (``skip_bad_records``): how many, and the first one's
    line and problem."""

    def __init__(self, keep_going: bool) -> None:
        self.keep_going = keep_going
        self.count = 0
        self.first: str | None = None

    def bad(self, uri: str, line: int, problem: str) -> None:
        if not self.keep_going:
            raise InputError(f"{uri}:{line}", problem)
        self.count += 1
        self.first = self.first or f"{uri}:{line}: {problem}"


def _fast_json() -> Any:
    """orjson's ``loads`` where it is installed (the text extra): 2-3x the standard
    library's on a document's line, which after a fast tokenizer is the floor."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


FAST_JSON = _fast_json()


def _record(line: bytes) -> tuple[Any, str | None]:
    """(the JSON object, None), or (None, what is wrong with the line). A line orjson
    refuses is read again by the standard library, whose reading (NaN, big integers,
    lone surrogates) and error messages are the reference."""
    if FAST_JSON is not None:
        try:
            return FAST_JSON(line), None
        except ValueError:
            pass
    try:
        return json.loads(line.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})"
    except ValueError as exc:
        return None, f"not JSON ({exc})"


def documents(
    f: TextFile,
    unit: TextUnit,
    opts: TextOptions,
    first_line: int,
    skips: Skips,
    batch: int = 1024,
) -> Iterator[Batch]:
    """A unit's documents in batches. ``first_line``: the line number (from 1) of the
    unit's first line in its file, for errors, which `skips` raises or counts."""
    text_path = opts.text_field.split(".")
    id_path = opts.id_field.split(".") if opts.id_field else None
    out = Batch(ids=[] if id_path else None)
    with reading(f.uri):
        if f.kind == "parquet":
            yield from _parquet_documents(f, unit, opts, batch)
            return
        if f.kind == "txt" and not opts.doc_per_line:
            data = b"".join(_chunks(f, opts.storage))
            if len(data) > opts.max_record_bytes:
                skips.bad(f.uri, 1, _too_large(len(data), opts))
                return
            try:
                whole = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                skips.bad(f.uri, 1 + data.count(b"\n", 0, exc.start), "not UTF-8 text")
                return
            yield Batch([whole], [0])
            return
        for place, (n, line) in enumerate(_lines(f, unit, opts.storage)):
            where = first_line + n
            if len(line) > opts.max_record_bytes:
                skips.bad(f.uri, where, _too_large(len(line), opts))
                continue
            if f.kind == "txt":
                try:
                    text = line.rstrip(b"\r").decode("utf-8")
                except UnicodeDecodeError as exc:
                    skips.bad(f.uri, where, f"not UTF-8 text (byte {exc.start})")
                    continue
            else:
                obj, problem = _record(line)
                value = _field(obj, text_path) if problem is None else None
                if problem is None and not isinstance(value, str):
                    what = "no" if value is None else "a non-string"
                    problem = f"{what} field {opts.text_field!r}"
                if problem is not None or not isinstance(value, str):
                    skips.bad(f.uri, where, problem or "no text")
                    continue
                text = value
                if out.ids is not None and id_path is not None:
                    key = _field(obj, id_path)
                    if isinstance(key, float):  # as the standard library reads it (big ints)
                        key = _field(json.loads(line.decode("utf-8")), id_path)
                    out.ids.append(str(key))
            out.texts.append(text)
            out.places.append(place)
            if len(out.texts) >= batch:
                yield out
                out = Batch(ids=[] if id_path else None)
    if out.texts:
        yield out


def _too_large(size: int, opts: TextOptions) -> str:
    return (
        f"a record of {size} bytes, over --max-record-bytes {opts.max_record_bytes} (a "
        f"tokenizer holds tens of times a document's size while it encodes it): raise it, "
        f"or pass it over with --skip-bad-records"
    )


def _parquet_documents(
    f: TextFile, unit: TextUnit, opts: TextOptions, batch: int
) -> Iterator[Batch]:
    fs, path = _open(f, opts.storage)
    columns = [opts.text_field] + ([opts.id_field] if opts.id_field else [])
    place = 0
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
                chunk = values[at : at + batch]
                yield Batch(
                    chunk,
                    list(range(place, place + len(chunk))),
                    keys[at : at + batch] if keys else None,
                )
                place += len(chunk)


def read_ahead(batches: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """``batches`` read by a thread of their own, at most ``depth`` ahead: reading,
    decompressing and parsing the next batch overlaps the encoding of this one (the
    tokenizer releases the GIL). An error in the reader is raised here, in order."""
    import queue
    import threading

    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        """Hand one item over; False once the consumer has gone."""
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for b in batches:
                if not put(("batch", b)):
                    return
            put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(("error", exc))

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    try:
        while True:
            kind, item = q.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
