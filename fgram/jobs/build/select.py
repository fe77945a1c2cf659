"""The select stage of `fgram build`, with numpy tasks: the cutoff and the first id of
every (count, length) group come from the passes' histograms (`pipeline.selection`);
decode tasks give the selected f-grams their tokens (prefix tokens + last token,
length by length) and bucket them by rank range; rank tasks sort whole groups by
token ids and write one Parquet file of consecutive fgram_ids each."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from fgram.jobs.build.passes import Plan, candidates
from fgram.jobs.executors import as_task
from fgram.jobs.stages import Stage
from fgram.pipeline import workdir as wf
from fgram.pipeline.errors import FgramError
from fgram.pipeline.table import Groups, bucket_order, write_ranked
from fgram.pipeline.workdir import WorkDir, load_array, save_array

RANK_ROWS = 4_000_000  # rows per rank task (a single larger group stays whole)


def rank_split(groups: Groups, parallelism: int, selected: int) -> np.ndarray:
    """First group of each rank task: tasks of about RANK_ROWS rows, as many as a
    multiple of the cores (no lone last round)."""
    rounds = max(1, math.ceil(selected / (parallelism * RANK_ROWS)))
    return groups.split(parallelism * rounds, selected)


_DECODED_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _decoded(
    plan: Plan, wd: WorkDir, k: int, nparts: int, kept: int
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of every selected k-gram and a dense map survivor id -> row (cached per
    worker process, for this run)."""
    key = (plan.run, k)
    if key not in _DECODED_CACHE:
        _DECODED_CACHE.clear()
        sids = np.concatenate(
            [load_array(wd.decoded(k, p, "sids"), mmap=False) for p in range(nparts)]
        )
        toks = [load_array(wd.decoded(k, p, "tokens"), mmap=False) for p in range(nparts)]
        row = np.full(kept, -1, dtype=np.int64)
        row[sids] = np.arange(len(sids))
        _DECODED_CACHE[key] = (np.concatenate(toks).reshape(-1, k), row)
    return _DECODED_CACHE[key]


@as_task
def decode_task(
    plan: Plan,
    k: int,
    p: int,
    offsets_by_len: dict,
    groups: Groups,
    task_firsts: np.ndarray,
    cutoff: int,
    cut_len: int,
) -> int:
    """Tokens of the selected k-grams of key range p, bucketed by rank task."""
    wd = WorkDir(plan.work)
    assert plan.codes is not None  # set once every pass has run
    idx, counts, prefix, last = candidates(wd, k, p, plan.codes[k], cutoff, cut_len)
    if k == 2:
        tokens = np.stack([prefix, last], axis=1).astype(np.uint32)
    else:
        prev = offsets_by_len[k - 1]
        ptoks, row = _decoded(plan, wd, k - 1, len(prev) - 1, prev[-1])
        rows = row[prefix]
        if len(rows) and rows.min() < 0:
            raise FgramError(f"internal: a selected {k}-gram's prefix is not selected")
        tokens = np.concatenate([ptoks[rows], last[:, None].astype(np.uint32)], axis=1)
    task = np.searchsorted(task_firsts, groups.index(counts, k), side="right") - 1
    order = bucket_order(task, len(task_firsts))
    # one copy, in rank-task order: the rank tasks read slices of it, and the
    # next length's decode maps survivor ids to rows through `sids`
    save_array(wd.decoded(k, p, "sids"), (idx + offsets_by_len[k][p])[order])
    save_array(wd.decoded(k, p, "tokens"), tokens[order])
    save_array(wd.decoded(k, p, "counts"), counts[order])
    save_array(
        wd.decoded(k, p, "offsets"), np.searchsorted(task[order], np.arange(len(task_firsts) + 1))
    )
    return len(idx)


@as_task
def rank_task(
    plan: Plan,
    r: int,
    parts_by_len: dict,
    groups: Groups,
    task_firsts: np.ndarray,
    selected: int,
    out_dir: str,
) -> int:
    """Number the rows of rank task r (whole groups) and write them as one Parquet file."""
    wd = WorkDir(plan.work)
    _, _, lo, hi = groups.task_span(task_firsts, r, selected)
    rows = {}
    for k, nparts in parts_by_len.items():
        toks, cnts = [], []
        for p in range(nparts):
            off = load_array(wd.decoded(k, p, "offsets"))
            a, b = int(off[r]), int(off[r + 1])
            if b > a:
                toks.append(np.asarray(load_array(wd.decoded(k, p, "tokens"))[a:b]))
                cnts.append(np.asarray(load_array(wd.decoded(k, p, "counts"))[a:b]))
        if toks:
            rows[k] = (np.concatenate(toks), np.concatenate(cnts))
    return write_ranked(rows, groups, lo, hi, wf.join(out_dir, f"part-{r:05d}.parquet"))


@dataclass(frozen=True)
class DecodeStage(Stage, name="decode", call=decode_task, index="p"):
    """Decode length k's selected f-grams: a task per key range (`decode_task`)."""

    plan: Plan
    k: int
    offsets_by_len: dict[int, list[int]]
    groups: Groups
    task_firsts: np.ndarray
    cutoff: int
    cut_len: int


@dataclass(frozen=True)
class RankStage(Stage, name="rank", call=rank_task, index="r"):
    """Rank and write the table: a task per rank range of whole groups (`rank_task`)."""

    plan: Plan
    parts_by_len: dict[int, int]
    groups: Groups
    task_firsts: np.ndarray
    selected: int
    out_dir: str


def write_table(
    ex, plan: Plan, offsets_by_len, groups: Groups, cutoff, cut_len, selected, staging
) -> dict:
    """Decode, rank and write the selected f-grams with numpy tasks (no per-row Spark)."""
    task_firsts = rank_split(groups, ex.parallelism, selected)
    parts_by_len = {k: len(o) - 1 for k, o in offsets_by_len.items()}
    t0 = time.time()
    for k in sorted(offsets_by_len):
        decoding = DecodeStage(plan, k, offsets_by_len, groups, task_firsts, cutoff, cut_len)
        ex.map_batched(parts_by_len[k], decoding.run)
    t1 = time.time()
    out_dir = wf.join(staging, "fgrams")
    wf.remove_tree(out_dir)  # a resumed run's earlier attempt at this stage
    wf.make_dirs(out_dir)
    ranking = RankStage(plan, parts_by_len, groups, task_firsts, selected, out_dir)
    ex.map(len(task_firsts), ranking.run)
    return {
        "decode_seconds": round(t1 - t0, 3),
        "rank_write_seconds": round(time.time() - t1, 3),
        "rank_tasks": len(task_firsts),
    }
