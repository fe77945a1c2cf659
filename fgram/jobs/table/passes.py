"""The passes of `fgram build`: for k = 2..K, count (a task per unit), merge and keep
(a task per key range), over numpy arrays in the run's work folder (`WorkDir`).
The driver (`driver.py`) runs them in order; each task is idempotent and leaves
its results as files (a count task also a completion marker, for --resume)."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass, field

import numpy as np

from fgram.jobs.executors import as_task
from fgram.jobs.runs import SCRATCH
from fgram.jobs.stages import Stage
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import InputError, OutputError
from fgram.pipeline.formats.reading import Shard, Unit
from fgram.pipeline.formats.registry import format_of, read_unit
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.markers import Markers
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import WorkDir, load_array, read_into, read_range, save_array
from fgram.pipeline.kernels.counting import ids_at, unit_table
from fgram.pipeline.kernels.keys import KeyCode
from fgram.pipeline.kernels.merging import ids_in, key_slice, merge_counts_bucketed, part_range
from fgram.pipeline.kernels.packing import pack_order, unpack_order
from fgram.pipeline.kernels.selection import histogram
from fgram.pipeline.kernels.streams import positions_by_length
from fgram.pipeline.records import JsonRecord, int_keys

MERGE_BYTES = 64 * 2**20  # target volume of one merge task


@dataclass
class Plan:
    """What every task needs: shipped with the task closure."""

    cfg: BuildConfig
    shards: list[Shard]
    units: list[Unit]
    work: Location  # on this machine, or a folder on the object store
    codes: dict | None = None  # length -> KeyCode of its keys, once every pass has run
    # this run's name in the workers' caches: a worker (Spark's are reused, and so is the
    # driver) may serve several runs of one output, whose work files have the same paths
    run: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class UnitCount(JsonRecord):
    """What a count task reports of its unit (and leaves as the unit's completion marker)."""

    FORMAT = 1

    unit: int
    documents: int  # documents started in the unit
    tokens: int
    counted: int  # candidate positions counted
    distinct: int  # distinct keys
    max_token: int  # the largest token id read (-1: none)
    files: dict[str, dict[str, int]] = field(default_factory=dict)  # what -> `save_array`'s
    positions: list[int] | None = None  # pass 2's: n-gram positions per length 2..K
    note: str | None = None  # said by the driver: why the unit was counted again


@dataclass
class RangeMerge(JsonRecord):
    """What a merge task reports of its key range: the count histogram of the keys it
    kept (at the pass's floor or above)."""

    FORMAT = 1

    part: int
    hist: dict[int, int]
    bytes: int = 0  # of the range's files (merged keys and counts)

    @classmethod
    def restore(cls, values: dict) -> dict:
        return {**values, "hist": int_keys(values["hist"])}


FREQUENT_TABLES: dict[tuple, np.ndarray] = {}  # a worker's: (run, k) -> pass k's frequent set


def _frequent_table(plan: Plan, wd: WorkDir, k: int, nparts: int) -> np.ndarray:
    """The whole frequent set of pass k (sorted mixed keys), cached per worker process."""
    key = (plan.run, k)
    if key not in FREQUENT_TABLES:
        FREQUENT_TABLES.clear()
        parts = [load_array(wd.frequent(k, p, "keys"), mmap=False) for p in range(nparts)]
        FREQUENT_TABLES[key] = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    return FREQUENT_TABLES[key]


def release_counting() -> None:
    """A worker's select tasks come after every count task of the run: give back the
    count's work arrays and the cached frequent table first (hundreds of MB a worker at
    16Mi-token units), so that they and the ranking are never resident together."""
    SCRATCH.clear()
    FREQUENT_TABLES.clear()


def _unit_answers(plan: Plan, wd: WorkDir, k: int, u: int, prev: dict) -> np.ndarray:
    """Global ids (INVALID where not frequent) of unit u's distinct keys of pass k."""
    if prev["broadcast"]:
        keys = load_array(wd.unit(k, u, "keys"))
        return ids_in(
            _frequent_table(plan, wd, k, prev["nparts"]),
            keys,
            out=SCRATCH.get("answers", len(keys), np.uint32),
        )
    chunks = []
    for p in range(prev["nparts"]):
        offsets = load_array(wd.answers(k, p, "offsets"))
        ids = load_array(wd.answers(k, p, "ids"))
        chunks.append(np.asarray(ids[offsets[u] : offsets[u + 1]]))
    return np.concatenate(chunks) if chunks else np.zeros(0, np.uint32)


def token_ceiling(shards: list[Shard]) -> int:
    """The largest token id the shards' types allow (pass 2's key code, before any is read)."""
    return max((format_of(s).top_token(s) for s in shards), default=0)


def pass_code(k: int, shards, kept_before: int | None, top_token: int | None) -> KeyCode:
    """Keys as narrow as the ids and tokens allow: exact one-word counting sorts.
    Pass 2 knows only what the inputs' types allow; later passes, the largest
    token read and the previous pass's number of frequent (k-1)-grams."""
    if k == 2:
        top = token_ceiling(shards)
        return KeyCode.fitting(top, top)
    assert kept_before is not None and top_token is not None  # known after pass 2
    return KeyCode.fitting(kept_before - 1, top_token)


@as_task
def count_task(plan: Plan, k: int, u: int, prev: dict | None, code: KeyCode) -> UnitCount:
    cfg = plan.cfg
    wd, markers = WorkDir(plan.work), count_markers(plan.work, k)
    damaged = None
    if markers.done(u):  # counted already (head start, or a resumed run)
        done = _marker(markers, u)
        damaged = _damaged(wd, k, done) if cfg.resume else None  # a killed run's: checked
        if damaged is None:
            return done
        markers.clear(u)  # counted again, from what it was counted from
    unit = plan.units[u]
    stream = read_unit(
        plan.shards[unit.shard], unit, cfg.read_options(), overlap=cfg.max_len - 1, scratch=SCRATCH
    )
    tokens = stream.tokens
    if k == 2:
        ids = tokens
    else:  # each position's (k-1)-gram id, from its key's global id (INVALID elsewhere)
        try:
            prev_order = unpack_order(
                read_into(wd.unit(k - 1, u, "order"), SCRATCH, "packed_order"), SCRATCH
            )
            assert prev is not None  # the previous pass's record, after pass 2
            answers = _unit_answers(plan, wd, k - 1, u, prev)
        except (FileNotFoundError, OutputError, InputError):
            if damaged is not None:  # the previous pass's files of the unit went after it
                raise OutputError(
                    f"{damaged}: not as it was written, and what it was counted from is "
                    f"gone; rerun without --resume to start over"
                ) from None
            if markers.done(u):  # another run of this task finished first
                return _marker(markers, u)
            raise
        ids = ids_at(answers, prev_order, len(tokens), SCRATCH)
    last = k == cfg.max_len
    uniq, counts, order, counted = unit_table(
        ids, tokens, k, stream.limit, want_order=not last, code=code, scratch=SCRATCH
    )
    files = {
        "keys": save_array(wd.unit(k, u, "keys"), uniq),
        "counts": save_array(wd.unit(k, u, "counts"), counts),
    }
    if not last:
        assert order is not None  # asked for
        files["order"] = save_array(wd.unit(k, u, "order"), pack_order(order, SCRATCH))
    stats = UnitCount(
        unit=u,
        documents=stream.documents,
        tokens=stream.n_tokens,
        counted=counted,
        distinct=len(uniq),
        max_token=stream.max_token,
        files=files,
        positions=(
            positions_by_length(tokens, stream.limit, cfg.max_len)[2:].tolist() if k == 2 else None
        ),
    )
    markers.mark(u, stats.to_json(), durable=False)  # the completion marker, last
    if k > 2:
        _drop_inputs(wd, k - 1, u)
    if damaged is not None:  # after the marker: said once, by the driver (`say_notes`)
        stats.note = f"{damaged}: not as it was written; unit {u} of pass {k} counted again"
    return stats


def say_notes(results: list[UnitCount]) -> None:
    """The driver says what its tasks noted (a task's stderr is an executor's log)."""
    for stats in results:
        if stats.note:
            sys.stderr.write(f"fgram: warning: {stats.note}\n")


def count_markers(work, k: int) -> Markers:
    """The completion markers of pass k's count tasks, one per unit."""
    return Markers(WorkDir(work).pass_dir(k), "count")


def _marker(markers: Markers, u: int) -> UnitCount:
    stats = UnitCount.from_json(markers.read(u))
    if stats is None:  # a marker of another format: the unit is counted again
        raise OutputError(f"{markers.path(u)}: a completion marker of another format")
    return stats


def _damaged(wd: WorkDir, k: int, stats: UnitCount) -> str | None:
    """The first of a counted unit's files that is not as its marker says it was written
    (a resumed run's, which may have changed since); None when every one is whole."""
    for what, record in stats.files.items():
        path = wd.unit(k, stats.unit, what)
        if not wf.intact(path, record):
            return path.uri
    return None


UNIT_FILES = ("keys", "counts", "order")


def _drop_inputs(wd: WorkDir, k: int, u: int) -> None:
    """Remove unit u's files of pass k once pass k+1 has counted the unit: nothing reads
    them again (pass k merged and kept before pass k+1 began; a rerun of this task finds
    its marker). Freed now, their pages go to the next files written here; freed a pass
    later in one batch, their memory would be cold again (a VM hands freed memory back to
    its host, and a file written into fresh pages is slower: docs/internals.md)."""
    for what in UNIT_FILES:  # gone already (another run of the task): no matter
        wf.remove(wd.unit(k, u, what))


# a merge task keeps memory maps of every unit's files (a file descriptor each) up to
# this many units; past it, it reads each unit's key range into memory instead (one more
# copy of what it merges: 2-3% of a build here), so that no limit on open files is met
MAPPED_UNITS = 64


@as_task
def merge_task(plan: Plan, k: int, p: int, nparts: int, floor: int, code: KeyCode) -> RangeMerge:
    wd = WorkDir(plan.work)
    lo, hi = part_range(nparts, p)
    runs = []
    mapped = len(plan.units) <= MAPPED_UNITS  # views of the maps, or ranges read
    for u in range(len(plan.units)):
        keys = load_array(wd.unit(k, u, "keys"))
        a, b = key_slice(keys, lo, hi)
        if b <= a:
            continue
        if mapped:
            runs.append(
                (np.asarray(keys[a:b]), np.asarray(load_array(wd.unit(k, u, "counts"))[a:b]))
            )
        else:  # the map goes with ``keys``: a task holds no file per unit
            runs.append(
                (read_range(wd.unit(k, u, "keys"), a, b), read_range(wd.unit(k, u, "counts"), a, b))
            )
    keys, counts = merge_counts_bucketed(
        runs, code, lo, 2**64 if hi is None else hi, scratch=SCRATCH
    )
    # only keys that may be kept: the threshold only rises from the floor (a small share
    # of the merged keys; the rest would be written and read once for nothing)
    kept = counts >= floor
    counts = counts[kept]
    written = save_array(wd.merged(k, p, "keys"), keys[kept])["bytes"]
    written += save_array(wd.merged(k, p, "counts"), counts)["bytes"]
    return RangeMerge(part=p, hist=histogram(counts, floor), bytes=written)


@as_task
def keep_task(
    plan: Plan, k: int, p: int, nparts: int, threshold: int, offset: int, answer: bool
) -> dict[str, dict[str, int]]:
    """Keep range p's frequent n-grams (and answer the units' lookups); returns the
    files written, by name in the work folder, with their records (`save_array`): a
    resumed run checks them before it builds on them."""
    wd = WorkDir(plan.work)
    keys = load_array(wd.merged(k, p, "keys"), mmap=False)
    counts = load_array(wd.merged(k, p, "counts"), mmap=False)
    keep = counts >= threshold
    fkeys = keys[keep]
    written = {}
    for what, arr in (("keys", fkeys), ("counts", counts[keep])):
        written[work_name(k, wd.frequent(k, p, what))] = save_array(wd.frequent(k, p, what), arr)
    if answer:
        lo, hi = part_range(nparts, p)
        offsets = np.zeros(len(plan.units) + 1, dtype=np.int64)
        chunks = []
        for u in range(len(plan.units)):
            ukeys = load_array(wd.unit(k, u, "keys"))
            a, b = key_slice(ukeys, lo, hi)
            chunks.append(ids_in(fkeys, np.asarray(ukeys[a:b]), offset))
            offsets[u + 1] = offsets[u] + (b - a)
        ids = np.concatenate(chunks) if chunks else np.zeros(0, np.uint32)
        for what, arr in (("ids", ids), ("offsets", offsets)):
            written[work_name(k, wd.answers(k, p, what))] = save_array(wd.answers(k, p, what), arr)
    return written


def work_name(k: int, path: Location) -> str:
    """A pass's file by its name in the work folder (where a resumed run finds it)."""
    return f"pass{k}/{os.path.basename(path.uri)}"


@dataclass(frozen=True)
class CountStage(Stage, name="count", call=count_task, index="u"):
    """Pass k's count: a task per unit (`count_task`)."""

    plan: Plan
    k: int
    prev: dict | None  # the pass before's key ranges and lookup path (None for pass 2)
    code: KeyCode

    def summary(self, results: list[UnitCount]) -> dict:
        return {
            "documents": sum(s.documents for s in results),
            "tokens": sum(s.tokens for s in results),
            "counted": sum(s.counted for s in results),
            "distinct": sum(s.distinct for s in results),
            # the work files its count tasks wrote (keys, counts, positions)
            "unit_bytes": sum(f["bytes"] for s in results for f in s.files.values()),
            "max_token": max((s.max_token for s in results), default=-1),
            "positions": (
                [sum(v) for v in zip(*(s.positions for s in results), strict=True)]
                if all(s.positions is not None for s in results)
                else None
            ),
        }


@dataclass(frozen=True)
class MergeStage(Stage, name="merge", call=merge_task, index="p"):
    """Pass k's merge: a task per key range (`merge_task`)."""

    plan: Plan
    k: int
    nparts: int
    floor: int  # the threshold the pass counted at: lower counts are never kept
    code: KeyCode

    def summary(self, results: list[RangeMerge]) -> dict:
        return {"hists": [m.hist for m in results], "bytes": sum(m.bytes for m in results)}


@dataclass(frozen=True)
class KeepStage(Stage, name="keep"):
    """Pass k's keep: a task per key range (`keep_task`); its ids start at the range's
    offset."""

    plan: Plan
    k: int
    nparts: int
    threshold: int
    offsets: list[int]  # the first id of each range
    answer: bool  # also answer the units' lookups for the next pass (the join path)

    def run(self, task: int) -> dict[str, dict[str, int]]:
        return keep_task(
            self.plan, self.k, task, self.nparts, self.threshold, self.offsets[task], self.answer
        )

    def summary(self, results: list[dict[str, dict[str, int]]]) -> dict:
        return {"files": {name: rec for r in results for name, rec in r.items()}}


def unit_files(plan: Plan, k: int) -> list[Location]:
    folder = WorkDir(plan.work).pass_dir(k)
    return [
        folder.child(name)
        for name in wf.names(folder)
        if name.startswith(("unit-", "merged-", "answers-"))
    ]


def candidates(wd: WorkDir, k: int, p: int, code: KeyCode, cutoff: int, cut_len: int):
    """The frequent k-grams of range p that may be selected: (index in the range, counts,
    prefix id or first token, last token)."""
    keys = load_array(wd.frequent(k, p, "keys"), mmap=False)
    counts = load_array(wd.frequent(k, p, "counts"), mmap=False)
    idx = np.flatnonzero((counts > cutoff) | ((counts == cutoff) & (k <= cut_len)))
    prefix, last = code.decode(keys[idx])
    return idx, counts[idx], prefix, last
