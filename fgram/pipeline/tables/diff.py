"""`fgram diff OLD NEW`: what changed between two f-gram tables.

F-grams are matched by their token sequence: each row's tokens become one
binary key (their int32 bytes, no copy of the values) and the two tables are
joined on it (Arrow's hash join). Holds both tables' keys in memory: ~5 bytes
per token plus the counts (a 10M-row table of 5-grams: ~0.4 GB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fgram.pipeline.tables.versions import open_table, table_dataset

if TYPE_CHECKING:
    from fgram.pipeline.io.storage import Location


def _keyed(path: Location, storage: dict[str, Any] | None) -> tuple[pa.Table, dict[str, Any], str]:
    loc, manifest = open_table(path, storage)
    t = (
        table_dataset(loc, manifest)
        .to_table(columns=["fgram_id", "tokens", "count"])
        .combine_chunks()
    )
    tokens = t.column("tokens").chunk(0) if t.num_rows else pa.array([], pa.list_(pa.int32()))
    offsets = (
        np.asarray(tokens.offsets, dtype=np.int64) - tokens.offsets[0].as_py()
        if t.num_rows
        else np.zeros(1, np.int64)
    )
    values = np.ascontiguousarray(tokens.flatten().to_numpy(zero_copy_only=False), np.int32)
    key = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(tokens), [None, pa.py_buffer(offsets * 4), pa.py_buffer(values)]
    )
    return (
        pa.table(
            {
                "key": key,
                "fgram_id": t.column("fgram_id"),
                "count": t.column("count"),
                "length": pc.list_value_length(tokens),
            }
        ),
        manifest,
        loc.uri,
    )


def diff_tables(
    old: Location, new: Location, show: int = 0, storage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Counts of f-grams added, removed, kept (and kept with another count), by length,
    the cutoff change, and the ``show`` most frequent added and removed f-grams."""
    a, ma, old_uri = _keyed(old, storage)
    b, mb, new_uri = _keyed(new, storage)
    j = b.join(
        a,
        "key",
        join_type="full outer",
        left_suffix="_new",
        right_suffix="_old",
        coalesce_keys=True,
    )
    added = j.filter(pc.is_null(j.column("count_old")))
    removed = j.filter(pc.is_null(j.column("count_new")))
    kept = j.filter(pc.and_(pc.is_valid(j.column("count_old")), pc.is_valid(j.column("count_new"))))
    changed = (
        int(pc.sum(pc.not_equal(kept.column("count_old"), kept.column("count_new"))).as_py() or 0)
        if kept.num_rows
        else 0
    )

    def by_length(t: pa.Table, col: str) -> dict[str, int]:
        if not t.num_rows:
            return {}
        lens = t.column(col).to_numpy(zero_copy_only=False)
        v, n = np.unique(lens, return_counts=True)
        return {str(int(x)): int(c) for x, c in zip(v, n, strict=True)}

    def top(t: pa.Table, count_col: str) -> list[dict[str, Any]]:
        if not show or not t.num_rows:
            return []
        t = t.sort_by([(count_col, "descending")]).slice(0, show)
        keys = t.column("key").to_pylist()
        return [
            {"tokens": np.frombuffer(k, np.int32).tolist(), "count": c}
            for k, c in zip(keys, t.column(count_col).to_pylist(), strict=True)
        ]

    return {
        "old": old_uri,
        "new": new_uri,
        "fgrams": {"old": a.num_rows, "new": b.num_rows},
        "added": added.num_rows,
        "removed": removed.num_rows,
        "kept": kept.num_rows,
        "kept_count_changed": changed,
        "added_by_length": by_length(added, "length_new"),
        "removed_by_length": by_length(removed, "length_old"),
        "cutoff_count": {"old": ma.get("cutoff_count"), "new": mb.get("cutoff_count")},
        "tokens": {
            "old": ma.get("totals", {}).get("tokens"),
            "new": mb.get("totals", {}).get("tokens"),
        },
        "top_added": top(added, "count_new"),
        "top_removed": top(removed, "count_old"),
    }
