"""What `fgram report` shows, as numbers (its ``report.json``; `report_page` draws them).

- A table (a build output, or a refresh folder's current version): its manifest's
  summary, f-grams per length, each pass's funnel (candidates, distinct, kept, the
  thresholds it counted and kept at) and seconds per stage, and, from one ordered scan
  of its ``fgram_id``, ``length`` and ``count`` columns (never the tokens, never the
  whole table in memory), each length's rank-frequency curve at log-spaced ranks and
  its first rows, whose tokens are then read alone.
- A refresh folder: its versions, each with the size of its diff from the one before.
- An annotate output: its match-length histogram.
The coverage-vs-S curve comes from `fgram coverage --sizes` (`coverage`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fgram.pipeline.config.options import TOP
from fgram.pipeline.errors import FgramError
from fgram.pipeline.io.storage import Location
from fgram.pipeline.tables.versions import VERSIONS, current, list_versions, table_dataset

FORMAT = "fgram-report"
VERSION = 1
Decode = Callable[[list[int]], str]


def rank_points(n: int, points: int) -> np.ndarray:
    """About ``points`` ranks in 1..n, log-spaced (1 and n always)."""
    if n < 1:
        return np.zeros(0, np.int64)
    grid = np.round(np.geomspace(1, n, num=max(2, min(points, n)))).astype(np.int64)
    return np.unique(np.concatenate([grid, [1, n]]))


def scan_table(
    dataset: Any, by_length: dict[int, int], top: int, points: int, where: str
) -> tuple[dict[int, dict[str, list[int]]], dict[int, list[int]]]:
    """One ordered scan of the table's ``fgram_id``, ``length`` and ``count`` columns:
    per length, (its rank-frequency curve: the count at each `rank_points` rank within
    the length, and the fgram_ids of its first ``top`` rows). The rows must be fgram_id
    0, 1, ... in order and their lengths as ``by_length`` (the manifest's) counts them."""
    grids = {length: rank_points(n, points) for length, n in by_length.items()}
    seen = dict.fromkeys(by_length, 0)
    curves: dict[int, dict[str, list[int]]] = {L: {"ranks": [], "counts": []} for L in by_length}
    firsts: dict[int, list[int]] = {L: [] for L in by_length}
    next_id = 0
    for batch in dataset.to_batches(columns=["fgram_id", "length", "count"], batch_size=1 << 20):
        ids = batch.column(0).to_numpy()
        if not len(ids):
            continue
        if not np.array_equal(ids, np.arange(next_id, next_id + len(ids))):
            raise FgramError(f"{where}: rows are not fgram_id {next_id}, {next_id + 1}, ...")
        next_id += len(ids)
        lens = batch.column(1).to_numpy()
        counts = batch.column(2).to_numpy()
        for length in np.unique(lens).tolist():
            rows = np.flatnonzero(lens == length)
            if length not in seen:
                raise FgramError(f"{where}: holds f-grams of length {length}; its manifest none")
            base = seen[length]
            grid = grids[length]
            lo, hi = np.searchsorted(grid, [base + 1, base + len(rows) + 1])
            curves[length]["ranks"] += grid[lo:hi].tolist()
            curves[length]["counts"] += counts[rows[grid[lo:hi] - base - 1]].tolist()
            firsts[length] += ids[rows[: max(top - base, 0)]].tolist()
            seen[length] = base + len(rows)
    if seen != by_length:
        raise FgramError(f"{where}: holds {seen} f-grams by length; its manifest {by_length}")
    return curves, firsts


def top_rows(dataset: Any, ids: list[int], decode: Decode | None) -> list[dict[str, Any]]:
    """The rows ``ids`` (ascending fgram_ids), with their tokens (and text)."""
    if not ids:
        return []
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = (pc.field("fgram_id") <= max(ids)) & pc.field("fgram_id").isin(pa.array(ids))
    t = dataset.to_table(columns=["fgram_id", "tokens", "count"], filter=wanted)
    rows: list[dict[str, Any]] = sorted(t.to_pylist(), key=lambda r: r["fgram_id"])
    for row in rows:
        if decode is not None:
            row["text"] = decode(row["tokens"])
    return rows


def time_rows(manifest: dict[str, Any]) -> dict[str, Any]:
    """Where a run's seconds went: each pass's stages, the select's, the tokenizing of a
    build from text, a refresh's planning, and the rest (the JVM's start as far as the
    driver's own work did not hide it, planning, publishing)."""
    rows = []
    if manifest.get("compile_seconds"):  # the first run of an install compiles the kernels
        rows.append(
            {
                "part": "compile (first run)",
                "stage": "kernels",
                "seconds": manifest["compile_seconds"],
            }
        )
    text = manifest.get("text") or {}
    if "seconds" in text:
        rows.append({"part": "text", "stage": "tokenize", "seconds": text["seconds"]})
    for stage, s in (manifest.get("timing") or {}).items():
        rows.append({"part": "refresh", "stage": stage, "seconds": s})
    for p in manifest.get("passes", []):
        for stage, s in p.get("stages", {}).items():
            rows.append({"part": f"pass {p['length']}", "stage": stage, "seconds": s})
    select = manifest.get("select") or {}
    parts = {k[: -len("_seconds")]: v for k, v in select.items() if k.endswith("_seconds")}
    if not parts and "seconds" in select:
        parts = {"select": select["seconds"]}
    rows += [{"part": "select", "stage": k, "seconds": v} for k, v in parts.items()]
    total = float(manifest.get("seconds", 0.0))
    rest = round(max(total - sum(r["seconds"] for r in rows), 0.0), 3)
    rows.append({"part": "start, plan, publish", "stage": "other", "seconds": rest})
    return {
        "seconds": total,
        "stages": rows,
        "executor_start_seconds": manifest.get("executor_start_seconds"),
        "head_start_tasks": manifest.get("head_start_tasks"),
    }


def table_report(
    loc: Location,
    manifest: dict[str, Any],
    top: int = TOP,
    points: int = 64,
    decode: Decode | None = None,
) -> dict[str, Any]:
    """The sections of a table's report (see the module's docstring)."""
    cfg = manifest["config"]
    by_length = {int(k): int(v) for k, v in manifest["by_length"].items()}
    dataset = table_dataset(loc, manifest)
    curves, firsts = scan_table(dataset, by_length, top, points, loc.uri)
    rows = top_rows(dataset, sorted(i for ids in firsts.values() for i in ids), decode)
    by_id = {r["fgram_id"]: r for r in rows}
    tok = manifest.get("tokenizer") or {}
    return {
        "table": {
            "path": loc.uri,
            "fgram_version": manifest.get("fgram_version"),
            "engine": manifest.get("engine"),
            "inputs": len(manifest.get("inputs", [])),
            "tokens": manifest["totals"]["tokens"],
            "documents": manifest["totals"]["documents"],
            "max_len": cfg["max_len"],
            "min_count": cfg["min_count"],
            "size": cfg.get("size"),
            "fgrams": manifest["fgrams"],
            "cutoff_count": manifest["cutoff_count"],
            "seconds": manifest["seconds"],
            "tokenizer": tok.get("name"),
        },
        "by_length": {str(k): v for k, v in sorted(by_length.items())},
        "rank_frequency": {str(k): curves[k] for k in sorted(curves)},
        "passes": [
            {
                key: p.get(key)
                for key in (
                    "length",
                    "count_threshold",
                    "threshold",
                    "candidates",
                    "distinct",
                    "kept",
                    "seconds",
                )
            }
            for p in manifest["passes"]
        ],
        "time": time_rows(manifest),
        "top": {str(k): [by_id[i] for i in firsts[k]] for k in sorted(firsts)},
    }


def tags_report(loc: Location, manifest: dict[str, Any]) -> dict[str, Any]:
    """An annotate output's report: its table, inputs and match-length histogram."""
    cov = manifest["coverage"]
    return {
        "tags": {
            "path": loc.uri,
            "table": manifest["table"],
            "inputs": len(manifest.get("inputs", [])),
            "positions": cov["positions"],
            "seconds": manifest.get("seconds"),
        },
        "match_lengths": {"1": cov["unmatched"], **cov["matched_by_length"]},
        "coverage": cov,
    }


def versions_report(root: Location, diff: bool = True) -> list[dict[str, Any]]:
    """A refresh folder's versions, oldest first, each with its diff from the one before
    (f-grams added, removed, kept with another count: `diff.diff_tables`, which holds
    both tables' keys in memory)."""
    from fgram.pipeline.tables.diff import diff_tables

    storage = dict(root.options)
    live = current(root)
    out: list[dict[str, Any]] = []
    previous: Location | None = None
    for vid in list_versions(root):
        loc = root.child(VERSIONS, vid)
        m = loc.child("manifest.json").read_json()
        rec = m.get("refresh") or {}
        row: dict[str, Any] = {
            "version": vid,
            "current": vid == live,
            "tokens": m["totals"]["tokens"],
            "documents": m["totals"]["documents"],
            "inputs": len(m.get("inputs", [])),
            "shards": {k: rec.get(f"{k}_shards") for k in ("new", "kept", "removed")},
            "fgrams": m["fgrams"],
            "cutoff_count": m["cutoff_count"],
            "seconds": m["seconds"],
        }
        if diff and previous is not None:
            d = diff_tables(previous, loc, storage=storage)
            row["diff"] = {k: d[k] for k in ("added", "removed", "kept", "kept_count_changed")}
        out.append(row)
        previous = loc
    return out
