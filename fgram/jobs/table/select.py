"""The select stage of `fgram build`, with numpy tasks: the cutoff and the first id of
every (count, length) group come from the passes' histograms (`pipeline.selection`);
decode tasks give the selected f-grams their tokens (prefix tokens + last token,
length by length) and bucket them by rank slot (`pipeline.layout`); rank tasks sort
whole groups, or a big group's lead-key range, by token ids and write one Parquet
file of consecutive fgram_ids each.

Two decodes (`DecodeStage`). Within --broadcast-budget, a task of length k holds
every selected (k-1)-gram's tokens. Past it, by key range (``by_range``): a route
task (`RouteStage`) sends each k-gram's prefix id to the (k-1)-range that holds it; the task
of (k-1)-range q, once it has decoded its own rows, answers the prefixes sent to it
with their tokens; the task of k-range p reads its answers from every range. No task
holds more than its ranges' rows, and every exchange is one file per task, read in
slices (the work folder: a local disk or an object store)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from fgram.jobs.executors import as_task
from fgram.jobs.stages import Stage
from fgram.jobs.table.passes import Plan, candidates, release_counting
from fgram.pipeline.errors import FgramError
from fgram.pipeline.formats.table import write_ranked
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import WorkDir, load_array, save_array
from fgram.pipeline.kernels.layout import Layout, boundaries, lead_key, sample
from fgram.pipeline.kernels.ranking import Groups, bucket_order, extend_rows, take_rows

Samples = list[tuple[int, int, np.ndarray]]  # (split slot, rows, sample of their lead keys)


def save_decoded(
    wd: WorkDir, k: int, p: int, sids, tokens, counts, groups: Groups, layout: Layout
) -> Samples:
    """Write range p's decoded k-grams in slot order (``offsets``: each slot's rows), the
    rows of a split slot sorted by lead key (``lead``); returns those slots' samples.
    One copy: the rank tasks read slices of it (and by key range, the next length's
    decode maps survivor ids to rows through ``sids``)."""
    slot_of_group = layout.slot_of(np.arange(len(groups.size)))
    slot = slot_of_group[groups.index(counts, k)]
    order = bucket_order(slot, len(layout.firsts))
    offsets = np.searchsorted(slot[order], np.arange(len(layout.firsts) + 1))
    samples: Samples = []
    if layout.split:
        lead = np.zeros(len(order), np.uint64)
        for s in layout.split:
            a, b = int(offsets[s]), int(offsets[s + 1])
            if b > a:
                keys = lead_key(tokens[order[a:b]])
                by_key = np.argsort(keys, kind="stable")
                order[a:b] = order[a:b][by_key]
                lead[a:b] = keys[by_key]
                samples.append((s, b - a, sample(lead[a:b])))
        save_array(wd.decoded(k, p, "lead"), lead)
    save_array(wd.decoded(k, p, "sids"), sids[order])
    save_array(wd.decoded(k, p, "tokens"), take_rows(tokens, order))
    save_array(wd.decoded(k, p, "counts"), counts[order])
    save_array(wd.decoded(k, p, "offsets"), offsets)
    return samples


_DECODED_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}


def _decoded(
    plan: Plan, wd: WorkDir, k: int, nparts: int, kept: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Tokens of every selected k-gram in id order (``by-sid``) and a map id -> row, None
    when every frequent k-gram is selected (the id is the row). Cached per worker
    process, for this run; the files are mapped, copied once into the table."""
    key = (plan.run, k)
    if key not in _DECODED_CACHE:
        _DECODED_CACHE.clear()
        parts = [load_array(wd.decoded(k, p, "by-sid")) for p in range(nparts)]
        toks = np.empty((sum(len(t) for t in parts), k), np.uint32)
        at = 0
        for t in parts:
            toks[at : at + len(t)] = t
            at += len(t)
        row = None
        if len(toks) != kept:  # a cutoff: the selected ids are a subset, in id order
            selected = np.zeros(kept, bool)
            for p in range(nparts):
                selected[load_array(wd.decoded(k, p, "sids"))] = True
            row = np.cumsum(selected, dtype=np.int64) - 1
            row[~selected] = -1
        _DECODED_CACHE[key] = (toks, row)
    return _DECODED_CACHE[key]


def _rows_of(row: np.ndarray | None, ids: np.ndarray, k: int) -> np.ndarray:
    if row is None:
        return ids
    rows = row[ids]
    if len(rows) and rows.min() < 0:
        raise FgramError(f"internal: a selected {k + 1}-gram's prefix is not selected")
    return rows


@as_task
def decode_task(
    plan: Plan,
    k: int,
    p: int,
    offsets_by_len: dict,
    groups: Groups,
    layout: Layout,
    cutoff: int,
    cut_len: int,
    by_range: bool,
) -> Samples:
    """Tokens of the selected k-grams of key range p: a (k-1)-prefix's tokens from every
    selected (k-1)-gram's (held whole), or (``by_range``) from the answers of the ranges
    that hold them; then, by range, answer the (k+1)-grams' prefixes routed here."""
    release_counting()
    wd = WorkDir(plan.work)
    assert plan.codes is not None  # set once every pass has run
    if k == 2 or not by_range:
        idx, counts, prefix, last = candidates(wd, k, p, plan.codes[k], cutoff, cut_len)
        sids = idx + offsets_by_len[k][p]
    else:
        sids = load_array(wd.decoded(k, p, "route-sids"), mmap=False)
        counts = load_array(wd.decoded(k, p, "route-counts"), mmap=False)
        last = load_array(wd.decoded(k, p, "route-last"), mmap=False)
    if k == 2:
        tokens = np.stack([prefix, last], axis=1).astype(np.uint32)
    elif by_range:
        prefix_tokens = _answers(wd, k, p, len(offsets_by_len[k - 1]) - 1)
        tokens = np.concatenate([prefix_tokens, last[:, None].astype(np.uint32)], axis=1)
    else:
        prev = offsets_by_len[k - 1]
        ptoks, row = _decoded(plan, wd, k - 1, len(prev) - 1, prev[-1])
        tokens = np.empty((len(last), k), np.uint32)
        extend_rows(ptoks, _rows_of(row, prefix, k - 1), last, tokens)
    if not by_range and k + 1 in offsets_by_len:  # the rows by id: the next length's prefixes
        save_array(wd.decoded(k, p, "by-sid"), tokens)
    samples = save_decoded(wd, k, p, sids, tokens, counts, groups, layout)
    if by_range and k + 1 in offsets_by_len:
        _answer(wd, k, p, offsets_by_len, sids, tokens)
    return samples


def _answers(wd: WorkDir, k: int, p: int, ranges: int) -> np.ndarray:
    """The prefix tokens of range p's k-grams, in its route order: from every range."""
    parts = []
    for q in range(ranges):
        off = load_array(wd.decoded(k, q, "answer-offsets"))
        if off[p + 1] > off[p]:
            parts.append(load_array(wd.decoded(k, q, "answer"))[off[p] : off[p + 1]])
    return np.concatenate(parts) if parts else np.zeros((0, k - 1), np.uint32)


@as_task
def route_task(plan: Plan, task: int, routes: list, offsets_by_len: dict, cutoff, cut_len):
    """Route task ``routes[task]`` = (k, p): the selectable k-grams of range p, bucketed
    by the (k-1)-range that holds their prefix (``route-offsets``)."""
    k, p = routes[task]
    release_counting()
    wd = WorkDir(plan.work)
    assert plan.codes is not None
    idx, counts, prefix, last = candidates(wd, k, p, plan.codes[k], cutoff, cut_len)
    prev = np.asarray(offsets_by_len[k - 1], np.int64)
    q = np.searchsorted(prev, prefix, side="right") - 1
    order = bucket_order(q, len(prev) - 1)
    save_array(wd.decoded(k, p, "route-sids"), (idx + offsets_by_len[k][p])[order])
    save_array(wd.decoded(k, p, "route-counts"), counts[order])
    save_array(wd.decoded(k, p, "route-last"), last[order])
    save_array(wd.decoded(k, p, "route-prefix"), prefix[order])
    save_array(wd.decoded(k, p, "route-offsets"), np.searchsorted(q[order], np.arange(len(prev))))
    return len(idx)


def _answer(wd: WorkDir, k: int, q: int, offsets_by_len: dict, sids, tokens) -> None:
    """The tokens of the k-grams of range q that the (k+1)-ranges asked for, in asking
    range order (``answer-offsets``)."""
    base, top = offsets_by_len[k][q], offsets_by_len[k][q + 1]
    row = np.full(top - base, -1, np.int64)
    row[sids - base] = np.arange(len(sids))
    chunks, offsets = [], [0]
    for p in range(len(offsets_by_len[k + 1]) - 1):
        off = load_array(wd.decoded(k + 1, p, "route-offsets"))
        asked = np.asarray(load_array(wd.decoded(k + 1, p, "route-prefix"))[off[q] : off[q + 1]])
        chunks.append(tokens[_rows_of(row, asked - base, k)])
        offsets.append(offsets[-1] + len(asked))
    answer = np.concatenate(chunks) if chunks else np.zeros((0, k), np.uint32)
    save_array(wd.decoded(k + 1, q, "answer"), answer)
    save_array(wd.decoded(k + 1, q, "answer-offsets"), np.asarray(offsets, np.int64))


@as_task
def rank_task(
    plan: Plan,
    r: int,
    parts_by_len: dict,
    groups: Groups,
    layout: Layout,
    bounds: dict,
    selected: int,
    out_dir: Location,
) -> int:
    """Number the rows of rank task r (whole groups, or a lead-key range of a split
    group) and write them as one Parquet file."""
    release_counting()
    wd = WorkDir(plan.work)
    s, j = layout.tasks()[r]
    g0, g1 = layout.groups_of(s, len(groups.size))
    path = out_dir.child(f"part-{r:05d}.parquet")
    if s in layout.split:
        return _rank_split(wd, s, j, g0, parts_by_len, groups, bounds[s], selected, path)
    lo, hi = int(groups.start[g0]), min(int(groups.start[g1]), selected)
    rows = {}
    for k, nparts in parts_by_len.items():
        toks, cnts = [], []
        for p in range(nparts):
            off = load_array(wd.decoded(k, p, "offsets"))
            a, b = int(off[s]), int(off[s + 1])
            if b > a:
                toks.append(np.asarray(load_array(wd.decoded(k, p, "tokens"))[a:b]))
                cnts.append(np.asarray(load_array(wd.decoded(k, p, "counts"))[a:b]))
        if toks:
            rows[k] = (np.concatenate(toks), np.concatenate(cnts))
    return write_ranked(rows, groups, lo, hi, path)


def _rank_split(wd, s, j, g, parts_by_len, groups: Groups, bound, selected, path) -> int:
    """Part j of split slot s (group g): the rows of lead keys in [bound[j-1], bound[j]),
    numbered from the group's first id plus the rows of lower keys in every range."""
    k = int(groups.length[g])
    lo_key = bound[j - 1] if j > 0 else None
    hi_key = bound[j] if j < len(bound) else None
    below, toks, cnts = 0, [], []
    for p in range(parts_by_len[k]):
        off = load_array(wd.decoded(k, p, "offsets"))
        a, b = int(off[s]), int(off[s + 1])
        if b == a:
            continue
        lead = load_array(wd.decoded(k, p, "lead"))[a:b]
        i0 = a + (int(np.searchsorted(lead, lo_key)) if lo_key is not None else 0)
        i1 = a + (int(np.searchsorted(lead, hi_key)) if hi_key is not None else b - a)
        below += i0 - a
        if i1 > i0:
            toks.append(np.asarray(load_array(wd.decoded(k, p, "tokens"))[i0:i1]))
            cnts.append(np.asarray(load_array(wd.decoded(k, p, "counts"))[i0:i1]))
    first = int(groups.start[g]) + below
    rows = {k: (np.concatenate(toks), np.concatenate(cnts))} if toks else {}
    n = sum(len(c) for c in cnts)
    starts = groups.start[:-1].copy()
    starts[g] = first
    return write_ranked(rows, groups, first, min(first + n, selected), path, starts)


@dataclass(frozen=True)
class DecodeStage(Stage, name="decode", call=decode_task, index="p"):
    """Decode length k's selected f-grams: a task per key range (`decode_task`)."""

    plan: Plan
    k: int
    offsets_by_len: dict[int, list[int]]
    groups: Groups
    layout: Layout
    cutoff: int
    cut_len: int
    by_range: bool


@dataclass(frozen=True)
class RouteStage(Stage, name="route", call=route_task, index="task"):
    """Send every length's prefixes to the ranges that hold them (`route_task`)."""

    plan: Plan
    routes: list[tuple[int, int]]
    offsets_by_len: dict[int, list[int]]
    cutoff: int
    cut_len: int


@dataclass(frozen=True)
class RankStage(Stage, name="rank", call=rank_task, index="r"):
    """Rank and write the table: a task per rank slot, or part of a split one (`rank_task`)."""

    plan: Plan
    parts_by_len: dict[int, int]
    groups: Groups
    layout: Layout
    bounds: dict[int, np.ndarray]
    selected: int
    out_dir: Location


def write_table(
    ex, plan: Plan, offsets_by_len, groups: Groups, cutoff, cut_len, selected, staging, by_range
) -> dict:
    """Decode (``by_range``: by key range), rank and write the selected f-grams with
    numpy tasks (no per-row Spark)."""
    layout = Layout.plan(groups, ex.parallelism, selected, plan.cfg.rank_rows)
    parts_by_len = {k: len(o) - 1 for k, o in offsets_by_len.items()}
    t0 = time.time()
    samples: Samples = []
    if by_range:
        routes = [(k, p) for k in sorted(parts_by_len) if k > 2 for p in range(parts_by_len[k])]
        if routes:
            routing = RouteStage(plan, routes, offsets_by_len, cutoff, cut_len)
            ex.map_batched(len(routes), routing.run)
    for k in sorted(offsets_by_len):
        decoding = DecodeStage(plan, k, offsets_by_len, groups, layout, cutoff, cut_len, by_range)
        for found in ex.map_batched(parts_by_len[k], decoding.run):
            samples.extend(found)
    t1 = time.time()
    bounds = {
        s: boundaries([(n, keys) for slot, n, keys in samples if slot == s], m)
        for s, m in layout.split.items()
    }
    out_dir = staging.child("fgrams")
    out_dir.remove_tree()  # a resumed run's earlier attempt at this stage
    wf.make_dirs(out_dir)
    ranking = RankStage(plan, parts_by_len, groups, layout, bounds, selected, out_dir)
    ex.map(len(layout.tasks()), ranking.run)
    return {
        "decode_seconds": round(t1 - t0, 3),
        "rank_write_seconds": round(time.time() - t1, 3),
        "rank_tasks": len(layout.tasks()),
        "split_groups": len(layout.split),
    }
