"""Token shards as `fgram tokenize` writes them (see docs/formats.md): Parquet with a
list<int32> column, or flat arrays with a separator after each document."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from fgram.pipeline.formats.table import arrow_array, arrow_list, write_table
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.io.storage import Place
from fgram.pipeline.kernels.streams import with_separators


class ShardWriter:
    """A unit's tokens written as shards of about ``shard_tokens`` tokens each:
    ``folder/shards/part-UUUUU-KKK.parquet`` (doc_id, tokens, source, row[, id]) or ``.bin``
    (``dtype``, each document followed by ``sep``)."""

    def __init__(
        self,
        folder: Place,
        unit: int,
        source: str,
        fmt: str,
        shard_tokens: int,
        dtype: str = "int32",
        sep: int | None = None,
    ) -> None:
        self.folder, self.u, self.source, self.fmt = folder, unit, source, fmt
        self.shard_tokens, self.dtype, self.sep = shard_tokens, dtype, sep
        self.names: list[str] = []
        self.sizes: list[dict[str, int]] = []
        # (doc ids, rows, lengths, tokens, ids or None) of the documents held for the next shard
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]] = []
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
        ext = "bin" if self.fmt == "bin" else "parquet"
        name = f"shards/part-{self.u:05d}-{len(self.names):03d}.{ext}"
        path = wf.join(self.folder, name)
        documents = sum(len(p[2]) for p in self.parts)
        tokens = sum(len(p[3]) for p in self.parts)
        if ext == "bin":
            assert self.sep is not None  # flat shards always have one (`run_tokenize`)
            write_bin(path, [(p[2], p[3]) for p in self.parts], self.dtype, self.sep)
        else:
            docs, rows, lengths, flat = (
                np.concatenate([p[i] for p in self.parts]) for i in range(4)
            )
            keyed = self.parts[0][4] is not None
            ids = [i for p in self.parts for i in p[4]] if keyed else None
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            columns = {
                "doc_id": arrow_array(docs, np.int64),
                "tokens": arrow_list(offsets, flat, np.int32),
                "source": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(len(docs), np.int32)), pa.array([self.source], pa.string())
                ),
                "row": arrow_array(rows, np.int64),
            }
            if ids is not None:
                columns["id"] = pa.array(ids, pa.string())
            write_table(pa.table(columns), path)
        self.names.append(name)
        self.sizes.append({"documents": documents, "tokens": tokens})
        self.parts, self.held = [], 0


def write_bin(
    path: Place, parts: list[tuple[np.ndarray, np.ndarray]], dtype: str, sep: int
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
