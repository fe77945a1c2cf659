"""The f-gram table's Parquet schema and writer: rows numbered by `kernels.ranking`,
written as one Parquet file per rank task."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import DTypeLike

from fgram.pipeline.errors import FgramError
from fgram.pipeline.io.failures import aside
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.ranking import Groups, place_ranked, rank_order, scatter_rows

SCHEMA = pa.schema(
    [
        ("fgram_id", pa.int64()),
        ("length", pa.int8()),
        ("tokens", pa.list_(pa.int32())),
        ("count", pa.int64()),
    ]
)


def table_record() -> dict[str, Any]:
    """The manifest's description of the table (a build's and a refresh's version)."""
    return {
        "path": "fgrams",
        "format": "parquet",
        "compression": "zstd",
        "columns": {
            "fgram_id": "int64",
            "length": "int8",
            "tokens": "list<int32>",
            "count": "int64",
        },
        "order": "fgram_id = rank by (count desc, length asc, tokens asc)",
    }


def write_ranked(
    rows: dict[int, tuple[np.ndarray, np.ndarray]],
    groups: Groups,
    lo: int,
    hi: int,
    path: Location,
    starts: np.ndarray | None = None,
) -> int:
    """Number rows of whole groups (``rows``: length -> (tokens, counts)) and write the
    ones with ids in [lo, hi) as one Parquet file, in id order. Returns how many.
    ``starts``: each group's first id here (default ``groups.start``; a task holding a
    part of a group gives that part's first id)."""
    n = max(hi - lo, 0)
    first_ids = groups.start[:-1] if starts is None else starts
    lengths = np.zeros(n, dtype=np.int8)
    counts = np.zeros(n, dtype=np.int64)
    placed = []
    for k, (toks, cnts) in rows.items():
        if not len(cnts):
            continue
        order = rank_order(toks, cnts)
        mine = groups.length == k
        dest = np.empty(len(order), np.int64)
        if not place_ranked(
            np.asarray(cnts, np.int64),
            order,
            groups.count[mine],
            first_ids[mine],
            lo,
            hi,
            k,
            lengths,
            counts,
            dest,
        ):
            raise FgramError(f"internal: a selected {k}-gram's count has no group")
        placed.append((toks, order, dest))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.zeros(int(offsets[-1]), dtype=np.int32)
    for toks, order, dest in placed:
        scatter_rows(toks, order, dest, offsets, flat)
    write_table(arrow_table(np.arange(lo, lo + n), lengths, offsets, flat, counts), path)
    return n


def arrow_array(values: np.ndarray, dtype: DTypeLike | None = None) -> pa.Array:
    """A 1-d numpy array as an Arrow array (as ``dtype``; no copy when it already is).

    Not `pa.array`: its first call in a process imports pandas when pandas is
    installed (most of a worker's first rank task)."""
    values = np.ascontiguousarray(values, dtype)
    if values.dtype.kind not in "iuf":  # Arrow packs booleans in bits: not this buffer
        raise TypeError(f"arrow_array takes integers or floats, not {values.dtype}")
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)]
    )


def arrow_list(
    offsets: np.ndarray, values: np.ndarray, dtype: DTypeLike | None = None
) -> pa.ListArray:
    """A list array from n + 1 offsets into values (``dtype``: the values' type)."""
    return pa.ListArray.from_arrays(arrow_array(offsets, np.int32), arrow_array(values, dtype))


def arrow_table(
    ids: np.ndarray,
    lengths: np.ndarray,
    offsets: np.ndarray,
    flat_tokens: np.ndarray,
    counts: np.ndarray,
) -> pa.Table:
    """The table's columns from numpy arrays (``offsets``: n + 1 starts into flat_tokens)."""
    return pa.Table.from_arrays(
        [
            arrow_array(ids, np.int64),
            arrow_array(lengths, np.int8),
            arrow_list(offsets, flat_tokens, np.int32),
            arrow_array(counts, np.int64),
        ],
        schema=SCHEMA,
    )


def write_table(table: pa.Table, path: Location) -> None:
    """One Parquet file, on this machine or on an object store (an object: written
    whole, then it appears)."""
    if path.local:  # aside, then renamed: whole or not at all
        with aside(path.path) as tmp:
            pq.write_table(table, tmp, compression="zstd", row_group_size=1 << 20)
        return
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, compression="zstd", row_group_size=1 << 20)
    path.write_bytes(buf.getvalue())
