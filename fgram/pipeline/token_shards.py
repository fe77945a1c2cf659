"""Token shards as `fgram tokenize` writes them (see docs/formats.md): Parquet with a
list<int32> column, or flat arrays with a separator after each document."""

from __future__ import annotations

import os
import uuid

import numpy as np
import pyarrow as pa

from . import workdir as wf
from .storage import Location, Place
from .table import arrow_array, arrow_list, write_table


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
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[str] | None]] = []
        self.rows: list[np.ndarray] = []
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
                    lengths[first:stop],
                    flat[at:end],
                    ids[first:stop] if ids is not None else None,
                )
            )
            self.rows.append(rows[first:stop])
            self.held += end - at
            first, at = stop, end
            if self.held >= self.shard_tokens:
                self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        docs = np.concatenate([p[0] for p in self.parts])
        lengths = np.concatenate([p[1] for p in self.parts])
        flat = np.concatenate([p[2] for p in self.parts])
        rows = np.concatenate(self.rows)
        ids = (
            [i for p in self.parts for i in (p[3] or [])] if self.parts[0][3] is not None else None
        )
        ext = "bin" if self.fmt == "bin" else "parquet"
        name = f"shards/part-{self.u:05d}-{len(self.names):03d}.{ext}"
        path = wf.join(self.folder, name)
        if ext == "bin":
            write_bin(path, lengths, flat, self.dtype, self.sep)
        else:
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            columns = {
                "doc_id": arrow_array(docs, np.int64),
                "tokens": arrow_list(offsets, flat, np.int32),
                "source": pa.array([self.source] * len(docs), pa.string()).dictionary_encode(),
                "row": arrow_array(rows, np.int64),
            }
            if ids is not None:
                columns["id"] = pa.array(ids, pa.string())
            write_table(pa.table(columns), path)
        self.names.append(name)
        self.sizes.append({"documents": len(docs), "tokens": int(len(flat))})
        self.parts, self.rows, self.held = [], [], 0


def write_bin(
    path: Place, lengths: np.ndarray, flat: np.ndarray, dtype: str, sep: int | None
) -> None:
    """Documents as one raw array, each followed by ``sep``."""
    out = np.full(len(flat) + len(lengths), sep, dtype=np.dtype(dtype).newbyteorder("<"))
    out[np.arange(len(flat)) + np.repeat(np.arange(len(lengths)), lengths)] = flat
    data = out.tobytes()
    if isinstance(path, Location) and not path.local:
        path.write_bytes(data)
        return
    local = path.path if isinstance(path, Location) else path
    tmp = f"{local}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, local)
