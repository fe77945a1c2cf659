"""Token shards as `fgram tokenize` writes them (see docs/formats.md), each format a
`TokenWriter` (`--format`): Parquet with a list<int32> column, or flat arrays with a
separator after each document. `ShardWriter` cuts a unit's documents into shards and
hands each to its format's writer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.table import arrow_array, arrow_list, write_table
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.streams import with_separators

Part = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]
# a run of documents: (doc ids, rows, lengths, concatenated tokens, ids or None)


class TokenWriter(ABC):
    """A shard format `fgram tokenize` writes: its files' extension, the token type and
    separator it needs, the columns it keeps, and one shard written from its parts."""

    name: ClassVar[str]
    extension: ClassVar[str]
    numbers_documents: ClassVar[bool] = False  # document ids and rows run on across units

    def token_type(
        self, vocab: int, eos: int | None, dtype: str | None, doc_sep: int | None, where: str
    ) -> tuple[str, int | None]:
        """(dtype, separator) of its tokens for a tokenizer of ``vocab`` ids whose end of
        document is ``eos`` (``dtype`` and ``doc_sep``: as given, or None), else one
        line naming the tokenizer (``where``) and what does not fit."""
        return "int32", doc_sep

    def columns(self, id_field: str | None) -> list[str] | None:
        """The columns its shards hold (None: no columns, raw tokens)."""
        return None

    def read_as(
        self, manifest: dict[str, Any], dtype: str | None, doc_sep: int | None, where: str
    ) -> dict[str, Any]:
        """The shard options a reader of an output of this format takes from its
        ``manifest`` (at ``where``): ``dtype`` and ``doc_sep`` as given (or None); one
        given that the shards contradict is refused, naming it."""
        return {}

    @abstractmethod
    def write(
        self, path: Location, parts: list[Part], source: str, dtype: str, sep: int | None
    ) -> None:
        """One shard at ``path`` (written aside, then renamed) of the documents of
        ``parts``, from the input file ``source``."""


class ParquetTokens(TokenWriter):
    """Parquet: doc_id, tokens list<int32>, source, row[, id]: a row per document."""

    name = "parquet"
    extension = "parquet"
    numbers_documents = True

    def columns(self, id_field: str | None) -> list[str] | None:
        return ["doc_id", "tokens", "source", "row"] + (["id"] if id_field else [])

    def read_as(
        self, manifest: dict[str, Any], dtype: str | None, doc_sep: int | None, where: str
    ) -> dict[str, Any]:
        return {"column": "tokens"}  # Parquet has its own types: no dtype is read

    def write(
        self, path: Location, parts: list[Part], source: str, dtype: str, sep: int | None
    ) -> None:
        docs, rows, lengths, flat = (np.concatenate([p[i] for p in parts]) for i in range(4))
        keyed = parts[0][4] is not None
        ids = [i for p in parts for i in p[4]] if keyed else None
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        columns = {
            "doc_id": arrow_array(docs, np.int64),
            "tokens": arrow_list(offsets, flat, np.int32),
            "source": pa.DictionaryArray.from_arrays(
                pa.array(np.zeros(len(docs), np.int32)), pa.array([source], pa.string())
            ),
            "row": arrow_array(rows, np.int64),
        }
        if ids is not None:
            columns["id"] = pa.array(ids, pa.string())
        write_table(pa.table(columns), path)


class BinTokens(TokenWriter):
    """Flat: raw uint16 (uint32 for vocabularies over 65536), each document followed by
    the separator (the tokenizer's end of document unless given)."""

    name = "bin"
    extension = "bin"

    def token_type(
        self, vocab: int, eos: int | None, dtype: str | None, doc_sep: int | None, where: str
    ) -> tuple[str, int | None]:
        dtype = dtype or ("uint16" if vocab <= 2**16 else "uint32")
        doc_sep = eos if doc_sep is None else doc_sep
        room = 2 ** (8 * np.dtype(dtype).itemsize)  # the ids the type holds
        if vocab > room:
            raise ConfigError(
                f"{where}: its {vocab} token ids do not fit {dtype}; use --dtype uint32"
            )
        if doc_sep is None:
            raise ConfigError(
                f"{where}: the tokenizer names no end-of-document token; "
                f"give the separator with --doc-sep ID"
            )
        if doc_sep >= room:
            raise ConfigError(f"--doc-sep {doc_sep} does not fit {dtype}")
        return dtype, doc_sep

    def read_as(
        self, manifest: dict[str, Any], dtype: str | None, doc_sep: int | None, where: str
    ) -> dict[str, Any]:
        # one rule for both: an option given is the manifest's or refused, naming it
        theirs = {
            "--dtype": (dtype, manifest["dtype"]),
            "--doc-sep": (doc_sep, manifest["doc_sep"]),
        }
        for name, (given, recorded) in theirs.items():
            if given is not None and given != recorded:
                what = "holds tokens as" if name == "--dtype" else "is separated by"
                raise ConfigError(
                    f"{name} {given}: {where} {what} {recorded} (its manifest.json); "
                    f"leave {name} out: a `fgram tokenize` output's manifest gives it"
                )
        return {"dtype": manifest["dtype"], "doc_sep": manifest["doc_sep"]}

    def write(
        self, path: Location, parts: list[Part], source: str, dtype: str, sep: int | None
    ) -> None:
        assert sep is not None  # flat shards always have one (`token_type`)
        write_bin(path, [(p[2], p[3]) for p in parts], dtype, sep)


WRITERS: dict[str, TokenWriter] = {w.name: w for w in (ParquetTokens(), BinTokens())}


class ShardWriter:
    """A unit's tokens written as shards of about ``shard_tokens`` tokens each:
    ``folder/shards/part-UUUUU-KKK.parquet`` (doc_id, tokens, source, row[, id]) or ``.bin``
    (``dtype``, each document followed by ``sep``)."""

    def __init__(
        self,
        folder: Location,
        unit: int,
        source: str,
        fmt: TokenWriter,
        shard_tokens: int,
        dtype: str = "int32",
        sep: int | None = None,
    ) -> None:
        self.folder, self.u, self.source, self.fmt = folder, unit, source, fmt
        self.shard_tokens, self.dtype, self.sep = shard_tokens, dtype, sep
        self.names: list[str] = []
        self.sizes: list[dict[str, int]] = []
        self.parts: list[Part] = []  # the documents held for the next shard
        self.held = 0

    def add(
        self,
        docs: np.ndarray,
        rows: np.ndarray,
        lengths: np.ndarray,
        flat: np.ndarray,
        ids: list[str] | None,
    ) -> None:
        """Documents (their ids and rows): a shard is cut once it holds ``shard_tokens``."""
        ends = np.cumsum(lengths)
        first, at = 0, 0  # the next document and its first token
        while first < len(lengths):
            room = self.shard_tokens - self.held
            stop = int(np.searchsorted(ends, at + room, side="left")) + 1
            stop = min(max(stop, first + 1), len(lengths))
            end = int(ends[stop - 1])
            self.parts.append(
                (
                    docs[first:stop],
                    rows[first:stop],
                    lengths[first:stop],
                    flat[at:end],
                    ids[first:stop] if ids is not None else None,
                )
            )
            self.held += end - at
            first, at = stop, end
            if self.held >= self.shard_tokens:
                self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        name = f"shards/part-{self.u:05d}-{len(self.names):03d}.{self.fmt.extension}"
        documents = sum(len(p[2]) for p in self.parts)
        tokens = sum(len(p[3]) for p in self.parts)
        self.fmt.write(self.folder.child(name), self.parts, self.source, self.dtype, self.sep)
        self.names.append(name)
        self.sizes.append({"documents": documents, "tokens": tokens})
        self.parts, self.held = [], 0


def write_bin(
    path: Location, parts: list[tuple[np.ndarray, np.ndarray]], dtype: str, sep: int
) -> None:
    """Documents, given as parts of (their lengths, their concatenated ids), as one raw
    little-endian array, each followed by ``sep``: one compiled pass, no copy between."""
    out = np.empty(
        sum(len(lengths) + len(ids) for lengths, ids in parts), np.dtype(dtype).newbyteorder("<")
    )
    at = 0
    for lengths, ids in parts:
        at = with_separators(np.ascontiguousarray(lengths, np.int64), ids, sep, out, at)
    as_location(path).write_bytes(out.data.cast("B"))  # aside, then renamed (or one PUT)
