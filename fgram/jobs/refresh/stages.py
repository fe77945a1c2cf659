"""The stages of a refresh, length by length (their tasks: `tasks`): count the new units
and scan the kept ones, merge per key range, extend the id table; then rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fgram.jobs.refresh.store import Level
from fgram.jobs.refresh.tasks import (
    RPlan,
    UnitCount,
    UnitScan,
    count_task,
    merge_task,
    rank_task,
    scan_task,
    table_task,
)
from fgram.jobs.stages import Stage
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.ranking import Groups


@dataclass(frozen=True)
class CountScanStage(Stage, name="count, scan"):
    """Length k's first job: count the new units (`count_task`), then scan the kept ones
    (`scan_task`), in one job (a scan is short next to a Spark task's launch)."""

    plan: RPlan
    k: int
    old_size: int  # T_{k-1}'s ids before this refresh
    todo: list[tuple[str, int]]  # ("count" or "scan", unit)

    def run(self, task: int) -> UnitCount | UnitScan:
        kind, u = self.todo[task]
        if kind == "count":
            return count_task(self.plan, self.k, u)
        return scan_task(self.plan, self.k, u, self.old_size)

    def summary(self, results: list) -> dict:
        scans = [r for r in results if isinstance(r, UnitScan)]
        return {
            "counts": [r for r in results if isinstance(r, UnitCount)],
            "scans": scans,
            "task_seconds": {
                "count": round(sum(r.seconds for r in results if isinstance(r, UnitCount)), 3),
                "scan": round(sum(r.seconds for r in scans), 3),
            },
        }


@dataclass(frozen=True)
class MergeStage(Stage, name="merge", call=merge_task, index="p"):
    """Length k's totals per key range (`merge_task`)."""

    plan: RPlan
    k: int
    nparts: int
    floor: int
    level: Level  # the length's base and delta pieces before
    fresh: list[dict]  # the new units' runs
    scanned: list[dict]  # the kept units' scan runs
    removed: list[dict]  # the removed shards' runs (subtracted)
    compact: bool  # write a new base (else a delta piece)


@dataclass(frozen=True)
class TableStage(Stage, name="table", call=table_task):
    """T_k extended by the k-grams at the threshold or above (`table_task`, one task)."""

    plan: RPlan
    k: int
    nparts: int
    threshold: int


@dataclass(frozen=True)
class RankStage(Stage, name="rank", call=rank_task, index="r"):
    """Rank and write the version's table: a task per rank range (`rank_task`)."""

    plan: RPlan
    lengths: list[int]
    groups: Groups
    task_firsts: np.ndarray
    selected: int
    out_dir: str | Location
