"""fgram build: exact f-gram selection on Spark (see SCONE.md, section 1).

Each pass k = 2..K is three small Spark jobs over files in a work folder:

1. count (one task per unit): read the unit's tokens, turn the ids of the
   previous pass into candidate k-gram keys (prefix and suffix both frequent),
   sort-count them, write the unit's distinct keys + counts and, for the next
   pass, the positions of each key (grouped by key, in key order).
2. merge (one task per key range): merge the units' sorted runs for its range
   of the (uniformly mixed) key space, write the keys counted at least the
   pass's floor (its threshold when it began); return a histogram of counts.
3. keep (one task per key range): keep the keys at or above the threshold
   (min-count, raised to the S-th largest count seen so far when --size is
   given). Their dense ids are ranks in key order. If that frequent set fits
   --broadcast-budget, the next pass's tasks read it whole; otherwise this task
   also answers every unit's lookups for its key range (a distributed join),
   so no task ever holds more than one range.

Then the select stage: the cutoff and the first id of every (count, length)
group come from the count histograms alone; decode tasks give the selected
f-grams their tokens (prefix tokens + last token, length by length) and
bucket them by rank range; rank tasks sort whole groups by token ids and
write one Parquet file of consecutive fgram_ids each. Past the broadcast
budget, decoding and ranking run as Spark SQL joins and a global sort instead.

Spark carries task numbers and small per-task summaries (one row per
f-gram only on that fallback); tokens and keys move as numpy arrays in files.
The driver never holds per-n-gram data. The output is published atomically.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from fgram import __version__
from fgram.pipeline import kernels as kn
from fgram.pipeline.config import BuildConfig
from fgram.jobs.executors import HeadStart, as_task, make_executor
from fgram.jobs.progress import PROGRESS
from fgram.pipeline import workdir as wf
from fgram.pipeline.errors import (ConfigError, FgramError, InputError, OutputError,
                                   StorageUnavailable, keeps_work)
from fgram.pipeline.table import Groups, arrow_array, bucket_order, table_record, write_ranked
from fgram.pipeline.inputs import (Shard, Unit, check_inputs, plan_shards, plan_units,
                                   read_unit, shard_record, tokens_of)
from fgram.pipeline.publish import OutputLock, check_output, finish, staging_path
from fgram.pipeline.storage import Location, check_bucket, is_remote, locate
from fgram.pipeline.workdir import (Sweeper, WorkDir, load_array, load_json, read_into, save_array,
                                    save_json)

MERGE_BYTES = 64 * 2**20   # target volume of one merge task


@dataclass
class Plan:
    """What every task needs: shipped with the task closure."""
    cfg: BuildConfig
    shards: list[Shard]
    units: list[Unit]
    work: str
    codes: dict | None = None    # length -> KeyCode of its keys, once every pass has run


# ---------------------------------------------------------------- tasks

_TABLE_CACHE: dict[tuple, np.ndarray] = {}
_SCRATCH = kn.Scratch()     # a worker's count tasks reuse its work arrays


def _frequent_table(wd: WorkDir, k: int, nparts: int) -> np.ndarray:
    """The whole frequent set of pass k (sorted mixed keys), cached per worker process."""
    key = (wd.root, k)
    if key not in _TABLE_CACHE:
        _TABLE_CACHE.clear()
        parts = [load_array(wd.frequent(k, p, "keys"), mmap=False) for p in range(nparts)]
        _TABLE_CACHE[key] = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    return _TABLE_CACHE[key]


def _unit_answers(plan: Plan, wd: WorkDir, k: int, u: int, prev: dict) -> np.ndarray:
    """Global ids (INVALID where not frequent) of unit u's distinct keys of pass k."""
    if prev["broadcast"]:
        keys = load_array(wd.unit(k, u, "keys"))
        return kn.ids_in(_frequent_table(wd, k, prev["nparts"]), keys,
                         out=_SCRATCH.get("answers", len(keys), np.uint32))
    chunks = []
    for p in range(prev["nparts"]):
        offsets = load_array(wd.answers(k, p, "offsets"))
        ids = load_array(wd.answers(k, p, "ids"))
        chunks.append(np.asarray(ids[offsets[u]:offsets[u + 1]]))
    return np.concatenate(chunks) if chunks else np.zeros(0, np.uint32)


def _token_ceiling(shards: list[Shard]) -> int:
    """The largest token id the shards' types allow (pass 2's key code, before any is read)."""
    top = 0
    for s in shards:
        if s.format == "flat":
            top = max(top, min(int(np.iinfo(np.dtype(s.dtype)).max), kn.MAX_TOKEN))
        else:
            top = kn.MAX_TOKEN
    return top


@as_task
def count_task(plan: Plan, k: int, u: int, prev: dict | None, code: kn.KeyCode) -> dict:
    cfg = plan.cfg
    wd = WorkDir(plan.work)
    if wf.exists(wd.unit_done(k, u)):     # counted already (head start, or a resumed run)
        return load_json(wd.unit_done(k, u))
    unit = plan.units[u]
    stream = read_unit(plan.shards[unit.shard], unit, cfg.read_options(), overlap=cfg.max_len - 1,
                       scratch=_SCRATCH)
    tokens = stream.tokens
    if k == 2:
        ids = tokens
    else:   # each position's (k-1)-gram id, from its key's global id (INVALID elsewhere)
        try:
            order = (read_into(wd.unit(k - 1, u, "pos"), _SCRATCH, "prev_pos"),
                     read_into(wd.unit(k - 1, u, "starts"), _SCRATCH, "prev_starts"))
            answers = _unit_answers(plan, wd, k - 1, u, prev)
        except (FileNotFoundError, OutputError, InputError):
            if wf.exists(wd.unit_done(k, u)):  # another run of this task finished first
                return load_json(wd.unit_done(k, u))
            raise
        ids = kn.ids_at(answers, order, len(tokens), _SCRATCH)
    last = k == cfg.max_len
    uniq, counts, order, counted = kn.unit_table(ids, tokens, k, stream.limit, want_order=not last,
                                                 code=code, scratch=_SCRATCH)
    save_array(wd.unit(k, u, "keys"), uniq)
    save_array(wd.unit(k, u, "counts"), counts)
    if not last:
        save_array(wd.unit(k, u, "pos"), order[0])
        save_array(wd.unit(k, u, "starts"), order[1])
    stats = {"unit": u, "documents": stream.documents, "tokens": stream.n_tokens,
             "counted": counted, "distinct": len(uniq), "max_token": stream.max_token}
    save_json(wd.unit_done(k, u), stats, durable=False)    # the unit's completion marker, last
    if k > 2:
        _drop_inputs(wd, k - 1, u)
    return stats


UNIT_FILES = ("keys", "counts", "pos", "starts")


def _drop_inputs(wd: WorkDir, k: int, u: int) -> None:
    """Remove unit u's files of pass k once pass k+1 has counted the unit: nothing reads
    them again (pass k merged and kept before pass k+1 began; a rerun of this task finds
    its marker). Freed now, their pages go to the next files written here; freed a pass
    later in one batch, their memory would be cold again (a VM hands freed memory back to
    its host: here, writing a file into fresh pages took 4-6x as long as into reused ones)."""
    for what in UNIT_FILES:     # gone already (another run of the task): no matter
        wf.remove(wd.unit(k, u, what))


@as_task
def merge_task(plan: Plan, k: int, p: int, nparts: int, floor: int, code: kn.KeyCode) -> dict:
    wd = WorkDir(plan.work)
    lo, hi = kn.part_range(nparts, p)
    runs = []
    for u in range(len(plan.units)):
        keys = load_array(wd.unit(k, u, "keys"))
        a, b = kn.key_slice(keys, lo, hi)
        if b > a:
            runs.append((np.asarray(keys[a:b]), np.asarray(load_array(wd.unit(k, u, "counts"))[a:b])))
    keys, counts = kn.merge_counts_bucketed(runs, code, lo, 2**64 if hi is None else hi,
                                            scratch=_SCRATCH)
    # only keys that may be kept: the threshold only rises from the floor (at 500M tokens
    # 5% of the merged keys; all of them were 4.5 GB of files, written and read once)
    kept = counts >= floor
    counts = counts[kept]
    save_array(wd.merged(k, p, "keys"), keys[kept])
    save_array(wd.merged(k, p, "counts"), counts)
    return {"part": p, "hist": kn.histogram(counts, floor)}


@as_task
def keep_task(plan: Plan, k: int, p: int, nparts: int, threshold: int, offset: int,
              answer: bool) -> int:
    wd = WorkDir(plan.work)
    keys = load_array(wd.merged(k, p, "keys"), mmap=False)
    counts = load_array(wd.merged(k, p, "counts"), mmap=False)
    keep = counts >= threshold
    fkeys = keys[keep]
    save_array(wd.frequent(k, p, "keys"), fkeys)
    save_array(wd.frequent(k, p, "counts"), counts[keep])
    if answer:
        lo, hi = kn.part_range(nparts, p)
        offsets = np.zeros(len(plan.units) + 1, dtype=np.int64)
        chunks = []
        for u in range(len(plan.units)):
            ukeys = load_array(wd.unit(k, u, "keys"))
            a, b = kn.key_slice(ukeys, lo, hi)
            chunks.append(kn.ids_in(fkeys, np.asarray(ukeys[a:b]), offset))
            offsets[u + 1] = offsets[u] + (b - a)
        save_array(wd.answers(k, p, "ids"),
                   np.concatenate(chunks) if chunks else np.zeros(0, np.uint32))
        save_array(wd.answers(k, p, "offsets"), offsets)
    return int(len(fkeys))


def _candidates(wd: WorkDir, k: int, p: int, code: kn.KeyCode, cutoff: int, cut_len: int):
    """The frequent k-grams of range p that may be selected: (index in the range, counts,
    prefix id or first token, last token)."""
    keys = load_array(wd.frequent(k, p, "keys"), mmap=False)
    counts = load_array(wd.frequent(k, p, "counts"), mmap=False)
    idx = np.flatnonzero((counts > cutoff) | ((counts == cutoff) & (k <= cut_len)))
    prefix, last = code.decode(keys[idx])
    return idx, counts[idx], prefix, last


def final_rows(plan: Plan, k: int, p: int, code: kn.KeyCode, offset: int, cutoff: int,
               cut_len: int):
    """Arrow rows of the frequent k-grams of range p that may be selected."""
    import pyarrow as pa
    idx, counts, prefix, last = _candidates(WorkDir(plan.work), k, p, code, cutoff, cut_len)
    return pa.RecordBatch.from_arrays(
        [arrow_array(np.full(len(idx), k, np.int8)), arrow_array(idx + offset),
         arrow_array(prefix), arrow_array(last, np.int32), arrow_array(counts)],
        names=["length", "sid", "prefix", "last", "count"])


# ---------------------------------------------------------------- driver

def add_length(hists: dict[int, dict[int, int]], k: int, part_hists: list[dict[int, int]],
               size: int | None, threshold: int) -> int:
    """Add length k's count histogram (from its key ranges) and raise the threshold to
    the S-th largest count seen so far (the safe bound of SCONE.md); every length's
    histogram keeps only counts at or above it. Returns the threshold."""
    hists[k] = kn.merge_hists(*part_hists)
    if size is not None:
        best = kn.kth_largest(kn.merge_hists(*hists.values()), size)
        if best is not None and best > threshold:
            threshold = best
    for length in hists:
        hists[length] = {c: n for c, n in hists[length].items() if c >= threshold}
    return threshold


def _selection(hists: dict[int, dict[int, int]], size: int | None):
    """Cutoff count, last length taken at the cutoff, number selected and selected per length.

    From per-length count histograms alone: everything above the cutoff is in;
    at the cutoff, whole lengths are taken shortest first, and the last one
    taken (``cut_len``) only partly (by token ids, decided in the final sort).
    """
    combined = kn.merge_hists(*hists.values())
    total = sum(combined.values())
    if size is None or total <= size:
        by_len = {k: sum(h.values()) for k, h in hists.items()}
        return (min(combined) if combined else 0), max(hists, default=0), total, by_len
    cutoff = kn.kth_largest(combined, size)
    by_len = {k: sum(n for c, n in h.items() if c > cutoff) for k, h in hists.items()}
    need = size - sum(by_len.values())
    cut_len = 0
    for length in sorted(hists):
        if need <= 0:
            break
        take = min(need, hists[length].get(cutoff, 0))
        if take:
            cut_len = length
            by_len[length] += take
            need -= take
    return cutoff, cut_len, size, by_len


@as_task
def warm_task(i: int) -> int:
    """A first task per core: starts the Python worker and loads the kernels."""
    kn.warm_up()
    return i


def check_work_reach(cfg: BuildConfig, ex) -> None:
    """A run whose work files `work_location` put on this machine's disk (an object-store
    output, tasks judged to run here) never sends a task to a cluster's executors, which
    cannot reach them: refused before any task runs there."""
    if is_remote(cfg.output) and ex.name == "spark" and not ex.sc.master.startswith("local") \
            and runs_here(cfg) and not cfg.work_dir:
        raise ConfigError(f"{cfg.output}: this run keeps its work files on this machine, which "
                          f"executors of {ex.sc.master} cannot reach; give the cluster's master "
                          f"with --master")


WARM_GROUP = "fgram-warm-up"
KILL_WAIT = 30.0    # seconds to wait for the cancelled warm-up job's tasks to end


class _Starting:
    """`make_executor` in a background thread, then (Spark) a first job of `warm_task`s
    that starts the Python workers and loads the kernels: ``ready()`` once both are
    done; ``result()`` waits only for the executor (and re-raises). `HeadStart` runs
    tasks in the driver meanwhile."""

    def __init__(self, cfg: BuildConfig, spark):
        import threading
        self._t0 = time.time()
        self.seconds: dict[str, float] = {}     # executor made, first job done (after start)
        self._out: list = []
        self._lock = threading.Lock()
        self._stop = False          # wait() was called: no warm-up to start (or finish)
        self._made = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cfg, spark), daemon=True)
        if cfg.engine == "local":       # nothing to wait for: the driver runs no task
            self._run(cfg, spark)
        else:
            self._thread.start()

    def _run(self, cfg, spark):
        try:
            ex = make_executor(cfg.engine, spark, cfg.master, cfg.conf)
            check_work_reach(cfg, ex)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self._out.append(exc)
            self._made.set()
            return
        self._out.append(ex)
        self.seconds["made"] = round(time.time() - self._t0, 3)
        self._made.set()
        if ex.name == "spark":
            with self._lock:
                if self._stop:
                    return
                ex.sc.setJobGroup(WARM_GROUP, "start the Python workers", interruptOnCancel=True)
            try:
                ex.map(ex.parallelism, warm_task)
                self.seconds["warm"] = round(time.time() - self._t0, 3)
            except Exception:  # noqa: BLE001 - only a warm-up: the real jobs report failures
                pass

    def wait(self) -> None:
        """Wait for the background start to end. A warm-up job still running is
        cancelled: the run is over (a small build ended ~3 s before the workers
        were warm, and waited for them)."""
        if self._thread.ident is None:
            return
        with self._lock:
            self._stop = True
            warming = self._made.is_set() and not isinstance(self._out[0], BaseException) \
                and self._out[0].name == "spark"
        while self._thread.is_alive():
            if warming:     # again until it ends: the job may not be submitted yet
                self._out[0].sc.cancelJobGroup(WARM_GROUP)
            self._thread.join(0.2)
        if warming and "warm" not in self.seconds:
            # the cancelled job has ended, its tasks may not: one still running when the
            # context stops at exit finds its broadcast gone and Spark logs an ERROR
            self._out[0].wait_idle(KILL_WAIT)

    def ready(self) -> bool:
        """Made and warm: until then the driver's own tasks beat queueing behind the
        warm-up job (measured: a refresh 21-22 s against 24-26 s side by side)."""
        return self._made.is_set() and not self._thread.is_alive()

    def made(self) -> bool:
        return self._made.is_set()

    def result(self):
        self._made.wait()
        if isinstance(self._out[0], BaseException):
            raise self._out[0]
        return self._out[0]


def run_build(cfg: BuildConfig, spark=None) -> dict:
    """Run `fgram build`; returns the manifest. Raises FgramError subclasses on bad input.

    ``cfg.engine == "local"`` runs the same tasks in forked processes without
    Spark (for measuring Spark's cost); otherwise ``spark`` (or a session built
    from ``cfg.master``/``cfg.conf``) runs them.
    """
    t_start = time.time()
    cfg.validate()
    check_inputs(cfg.inputs, cfg.storage)     # a missing input: said before the JVM starts
    out = check_output(cfg.output, cfg.overwrite, cfg.storage, cfg.resume)
    with OutputLock(out):
        return _run_locked(cfg, spark, out, t_start)


def run_fingerprint(cfg: BuildConfig, shards) -> dict:
    """What a run's intermediates depend on: a rerun may reuse them only if it is equal."""
    rec = cfg.record()
    for key in ("output", "overwrite", "resume", "engine", "master", "conf", "storage",
                "work_dir", "strict"):
        rec.pop(key, None)
    return {"fgram_version": __version__, "config": rec,
            "inputs": [shard_record(s) for s in shards]}


def fingerprint_digest(fingerprint: dict) -> str:
    import hashlib
    import json
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:32]


def _prepare_staging(cfg: BuildConfig, out: Location, fingerprint: dict
                     ) -> tuple[str, dict | None]:
    """The staging folder and, with --resume, the state of a previous run to continue.

    Leftovers of an unfinished run are removed unless --resume finds that they
    belong to this very run (same options, same inputs); then its completed
    passes and counted units are kept.
    """
    staging = work_location(cfg, out)
    work = wf.join(staging, "_work")
    run_record = wf.join(work, "run.json")
    if wf.exists(run_record) or wf.names(staging):
        old = load_json(run_record) if wf.exists(run_record) else None
        if cfg.resume and old == fingerprint:
            return staging, _load_state(work) or _fresh_state(cfg)
        if cfg.resume and old is not None:
            what = "inputs" if old.get("inputs") != fingerprint["inputs"] else "options"
            raise OutputError(f"{out.uri}: cannot resume: the unfinished run there had other {what}; "
                              f"rerun without --resume to start over")
        if old is not None:     # said, not done silently: it may hold hours of work
            sys.stderr.write(f"fgram: removing an unfinished run's work in "
                             f"{getattr(staging, 'uri', staging)} (--resume would continue it)\n")
        wf.remove_tree(staging)
    wf.make_dirs(work)
    save_json(run_record, fingerprint)
    return staging, None


def work_location(cfg: BuildConfig, out: Location):
    """Where a run's staging folder is (its work files and state, then the table before
    it is published): in ``--work-dir`` when given; beside a local output (a local path);
    for an output on an object store, this machine's cache when the tasks run here
    (local mode, --engine local), else the object store itself, beside the output (a
    `Location` every executor reaches: a cluster without a shared mount)."""
    if cfg.work_dir:
        import hashlib
        where = locate(cfg.work_dir, cfg.storage)
        check_bucket(where)
        name = f".{out.name}-{hashlib.sha256(out.uri.encode()).hexdigest()[:12]}.fgram-staging"
        return where.child(name).path if where.local else where.child(name)
    if out.local or runs_here(cfg):
        return staging_path(out)
    return out.sibling(f".{out.name}.fgram-staging")


def runs_here(cfg: BuildConfig) -> bool:
    """Whether the tasks run on this machine: --engine local, or Spark in local mode."""
    if cfg.engine == "local":
        return True
    from fgram.pipeline.spark import effective_master
    return effective_master(cfg.master).startswith("local")


def _run_locked(cfg: BuildConfig, spark, out: Location, t_start: float) -> dict:
    # Spark's JVM starts (seconds, about one core) while the driver plans, loads
    # the kernels and counts pass-2 units itself on the other core
    starting = _Starting(cfg, spark)
    staging = None
    try:
        shards = plan_shards(cfg.inputs, cfg.read_options())
        units = plan_units(shards, cfg.unit_tokens)
        kn.warm_up()   # compile (or load) the kernels once here, not in every worker at once
        fingerprint = run_fingerprint(cfg, shards)
        staging, state = _prepare_staging(cfg, out, fingerprint)
        plan = Plan(cfg, shards, units, wf.join(staging, "_work"))
        resumed = _resume_record(plan, state)
    except BaseException as exc:
        starting.wait()     # the input's error is the one to report
        if staging and not keeps_work(exc):
            wf.remove_tree(staging)
        raise
    try:
        executor = HeadStart(starting, cfg.master, release=_SCRATCH.clear)
        manifest = _build(executor, plan, staging, t_start, state or _fresh_state(cfg))
        manifest["head_start_tasks"] = executor.in_driver
        manifest["executor_start_seconds"] = starting.seconds
        manifest["run_fingerprint"] = fingerprint_digest(fingerprint)
        if resumed:
            manifest["resumed"] = resumed
        finish(staging, out, manifest)
        starting.wait()     # a warm-up job still running would be cut off at exit, noisily
        return manifest
    except BaseException as exc:
        where = getattr(staging, "uri", staging)
        if not keeps_work(exc):
            wf.remove_tree(staging)
        elif isinstance(exc, StorageUnavailable):     # one line: the cause, then what is kept
            raise StorageUnavailable(f"{exc}; the completed passes are kept in {where}: "
                                     f"rerun with --resume once it answers") from None
        else:       # for the command line's one line (cli.main)
            exc.fgram_kept = f"the completed passes are kept in {where}: rerun with --resume " \
                             f"to continue"
        raise


def _resume_record(plan: Plan, state: dict | None) -> dict | None:
    if state is None:
        return None
    wd = WorkDir(plan.work)
    k = state["next"]
    done = sum(wf.exists(wd.unit_done(k, u)) for u in range(len(plan.units))) \
        if k <= plan.cfg.max_len else 0
    return {"from_pass": k, "units_counted_before": done}


def _pass_code(k: int, shards, kept_before: int | None, top_token: int | None) -> kn.KeyCode:
    """Keys as narrow as the ids and tokens allow: exact one-word counting sorts.
    Pass 2 knows only what the inputs' types allow; later passes, the largest
    token read and the previous pass's number of frequent (k-1)-grams."""
    if k == 2:
        top = _token_ceiling(shards)
        return kn.KeyCode.fitting(top, top)
    return kn.KeyCode.fitting(kept_before - 1, top_token)


def _fresh_state(cfg: BuildConfig) -> dict:
    """What the driver knows between passes (saved after each, for --resume)."""
    return {"next": 2, "threshold": cfg.min_count, "hists": {}, "passes": [], "prev": None,
            "offsets": {}, "codes": {}, "totals": {"documents": 0, "tokens": 0},
            "top_token": None, "kept": None}


def _save_state(work, st: dict) -> None:
    save_json(wf.join(work, "state.json"), st)


def _load_state(work: str) -> dict | None:
    """The state after the last completed pass (int keys restored), or None."""
    path = wf.join(work, "state.json")
    if not wf.exists(path):
        return None
    st = load_json(path)
    st["hists"] = {int(k): {int(c): n for c, n in h.items()} for k, h in st["hists"].items()}
    st["offsets"] = {int(k): v for k, v in st["offsets"].items()}
    st["codes"] = {int(k): v for k, v in st["codes"].items()}
    return st


def _build(ex, plan: Plan, staging, t_start: float, st: dict) -> dict:
    cfg, shards, units, work = plan.cfg, plan.shards, plan.units, plan.work
    hists, offsets_by_len = st["hists"], st["offsets"]
    k = st["next"]
    sweeper = Sweeper()
    while k <= cfg.max_len:
        t0 = time.time()
        floor = threshold = st["threshold"]
        code = _pass_code(k, shards, st["kept"], st["top_token"])
        prev = st["prev"]
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: count", len(units), tokens_of(shards, units))
        stats = ex.map(len(units), lambda u, k=k, prev=prev, c=code: count_task(plan, k, u, prev, c),
                       overlap=True, progress=True)
        t_count = time.time()
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: merge, keep")
        if k == 2:
            st["totals"] = {"documents": sum(s["documents"] for s in stats),
                            "tokens": sum(s["tokens"] for s in stats)}
            if st["totals"]["tokens"] == 0:
                raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")
            st["top_token"] = max(s["max_token"] for s in stats)
        distinct = sum(s["distinct"] for s in stats)
        nparts = max(ex.parallelism, math.ceil(distinct * 12 / MERGE_BYTES))
        merged = ex.map_batched(nparts, lambda p, k=k, n=nparts, f=floor, c=code:
                                 merge_task(plan, k, p, n, f, c))
        t_merge = time.time()
        part_hists = [m["hist"] for m in merged]
        threshold = add_length(hists, k, part_hists, cfg.size, threshold)
        kept_per_part = [sum(n for c, n in h.items() if c >= threshold) for h in part_hists]
        offsets = np.concatenate([[0], np.cumsum(kept_per_part)]).astype(np.int64).tolist()
        offsets_by_len[k] = offsets
        kept = offsets[-1]
        if kept >= int(kn.INVALID):
            raise FgramError(f"pass {k}: {kept} frequent n-grams exceed the 2**32-1 id space")
        broadcast = kept * 8 <= cfg.broadcast_budget or ex.name == "local"
        answer = k < cfg.max_len and not broadcast
        ex.map_batched(nparts, lambda p, k=k, n=nparts, t=threshold, o=offsets, a=answer:
                       keep_task(plan, k, p, n, t, o[p], a))
        st["passes"].append({
            "length": k, "count_threshold": floor, "threshold": threshold,
            "candidates": sum(s["counted"] for s in stats), "distinct": distinct,
            "kept": kept, "partitions": nparts, "key_bits": [code.prefix_bits, code.last_bits],
            "lookup": "broadcast" if broadcast else "join",
            "seconds": round(time.time() - t0, 3),
            "stages": {"count": round(t_count - t0, 3), "merge": round(t_merge - t_count, 3),
                       "keep": round(time.time() - t_merge, 3)}})
        st.update(threshold=threshold, kept=kept, prev={"nparts": nparts, "broadcast": broadcast},
                  next=k + 1 if kept else cfg.max_len + 1)
        st["codes"][k] = [code.prefix_bits, code.last_bits]
        _save_state(work, st)      # pass k is a completed unit: a rerun continues after it
        if k > 2:   # the previous pass's per-unit files were consumed by this one
            sweeper.sweep(_unit_files(plan, k - 1))
        k = st["next"]
    sweeper.wait()
    totals, passes = st["totals"], st["passes"]
    t0 = time.time()
    PROGRESS.stage("select")
    plan.codes = {k: kn.KeyCode(*bits) for k, bits in st["codes"].items()}
    cutoff, cut_len, selected, by_len = _selection(hists, cfg.size)
    groups = Groups(hists, cutoff, cut_len)
    # the decode of length k holds every selected (k-1)-gram's tokens in each task
    widest = max((int(groups.size[groups.length == k].sum()) * (k - 1) * 4 +
                  offsets_by_len.get(k - 1, [0])[-1] * 8 for k in offsets_by_len), default=0)
    if ex.name == "local" or widest <= cfg.broadcast_budget:
        final = "broadcast"
        select_stages = _write_table_tasks(ex, plan, offsets_by_len, groups, cutoff, cut_len,
                                           selected, staging)
    else:
        final = "join"
        _write_table(ex.spark, plan, offsets_by_len, cutoff, cut_len, selected, staging)
        select_stages = {}
    wf.remove_tree(work)
    return {
        "fgram_version": __version__,
        "kind": "fgram-table",
        "engine": ex.name,
        "config": cfg.record(),
        "inputs": [shard_record(s) for s in shards],
        "units": len(units),
        "totals": totals,
        "passes": passes,
        "cutoff_count": cutoff if selected else None,
        "fgrams": selected,
        "by_length": {str(k): n for k, n in sorted(by_len.items())},
        "select": {"decode": final, "seconds": round(time.time() - t0, 3), **select_stages},
        "seconds": round(time.time() - t_start, 3),
        "table": table_record(),
    }


def _unit_files(plan: Plan, k: int) -> list[str]:
    folder = WorkDir(plan.work).pass_dir(k)
    return [wf.join(folder, name) for name in wf.names(folder)
            if name.startswith(("unit-", "merged-", "answers-"))]


RANK_ROWS = 4_000_000   # rows per rank task (a single larger group stays whole)


def rank_split(groups: Groups, parallelism: int, selected: int) -> np.ndarray:
    """First group of each rank task: tasks of about RANK_ROWS rows, as many as a
    multiple of the cores (no lone last round)."""
    rounds = max(1, math.ceil(selected / (parallelism * RANK_ROWS)))
    return groups.split(parallelism * rounds, selected)


_DECODED_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _decoded(wd: WorkDir, k: int, nparts: int, kept: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of every selected k-gram and a dense map survivor id -> row."""
    key = (wd.root, k)
    if key not in _DECODED_CACHE:
        _DECODED_CACHE.clear()
        sids = [load_array(wd.decoded(k, p, "sids"), mmap=False) for p in range(nparts)]
        toks = [load_array(wd.decoded(k, p, "tokens"), mmap=False) for p in range(nparts)]
        sids = np.concatenate(sids)
        row = np.full(kept, -1, dtype=np.int64)
        row[sids] = np.arange(len(sids))
        _DECODED_CACHE[key] = (np.concatenate(toks).reshape(-1, k), row)
    return _DECODED_CACHE[key]


@as_task
def decode_task(plan: Plan, k: int, p: int, offsets_by_len: dict, groups: Groups,
                task_firsts: np.ndarray, cutoff: int, cut_len: int) -> int:
    """Tokens of the selected k-grams of key range p, bucketed by rank task."""
    wd = WorkDir(plan.work)
    idx, counts, prefix, last = _candidates(wd, k, p, plan.codes[k], cutoff, cut_len)
    if k == 2:
        tokens = np.stack([prefix, last], axis=1).astype(np.uint32)
    else:
        prev = offsets_by_len[k - 1]
        ptoks, row = _decoded(wd, k - 1, len(prev) - 1, prev[-1])
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
    save_array(wd.decoded(k, p, "offsets"),
               np.searchsorted(task[order], np.arange(len(task_firsts) + 1)))
    return len(idx)


@as_task
def rank_task(plan: Plan, r: int, parts_by_len: dict, groups: Groups, task_firsts: np.ndarray,
              selected: int, out_dir: str) -> int:
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


def _write_table_tasks(ex, plan: Plan, offsets_by_len, groups: Groups, cutoff, cut_len,
                       selected, staging) -> dict:
    """Decode, rank and write the selected f-grams with numpy tasks (no per-row Spark)."""
    task_firsts = rank_split(groups, ex.parallelism, selected)
    parts_by_len = {k: len(o) - 1 for k, o in offsets_by_len.items()}
    t0 = time.time()
    for k in sorted(offsets_by_len):
        ex.map_batched(parts_by_len[k], lambda p, k=k: decode_task(
            plan, k, p, offsets_by_len, groups, task_firsts, cutoff, cut_len))
    t1 = time.time()
    out_dir = wf.join(staging, "fgrams")
    wf.remove_tree(out_dir)        # a resumed run's earlier attempt at this stage
    wf.make_dirs(out_dir)
    ex.map(len(task_firsts), lambda r: rank_task(plan, r, parts_by_len, groups, task_firsts,
                                                 selected, out_dir))
    return {"decode_seconds": round(t1 - t0, 3), "rank_write_seconds": round(time.time() - t1, 3),
            "rank_tasks": len(task_firsts)}


def _write_table(spark, plan: Plan, offsets_by_len, cutoff, cut_len, selected, staging) -> None:
    from pyspark.sql import functions as F

    if not isinstance(staging, str):
        raise ConfigError(f"{staging.uri}: the selected f-grams' tokens exceed "
                          f"--broadcast-budget, and the Spark SQL select that takes over then "
                          f"writes to a shared folder only; raise --broadcast-budget")
    budget = plan.cfg.broadcast_budget
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(budget) if budget > 0 else "-1")
    row_schema = "length byte, sid long, prefix long, last int, count long"
    decoded, previous = [], None
    for k in sorted(offsets_by_len):
        offsets = offsets_by_len[k]
        tasks = [(p, offsets[p]) for p in range(len(offsets) - 1)]

        def rows(batches, k=k, tasks=tasks):
            for batch in batches:
                for t in batch.column(0).to_pylist():
                    p, off = tasks[t]
                    yield final_rows(plan, k, p, plan.codes[k], off, cutoff, cut_len)

        df = spark.range(0, len(tasks), 1, numPartitions=max(1, len(tasks))).mapInArrow(
            rows, row_schema)
        if previous is None:
            dk = df.select("count", "length", "sid",
                           F.array(F.col("prefix").cast("int"), F.col("last")).alias("tokens"))
        else:
            parent = previous.select(F.col("sid").alias("prefix"), F.col("tokens").alias("ptok"))
            dk = df.join(parent, "prefix").select(
                "count", "length", "sid", F.concat("ptok", F.array("last")).alias("tokens"))
        dk = dk.persist()
        decoded.append(dk)
        previous = dk
    table = decoded[0]
    for dk in decoded[1:]:
        table = table.unionByName(dk)
    ordered = table.select("count", "length", "tokens").orderBy(
        F.col("count").desc(), F.col("length").asc(), F.col("tokens").asc()).persist()

    def sizes(batches):
        import pyarrow as pa
        from pyspark import TaskContext
        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pydict({"pid": [TaskContext.get().partitionId()], "n": [n]})

    counts = {r["pid"]: r["n"] for r in ordered.mapInArrow(sizes, "pid long, n long").collect()}
    starts, acc = {}, 0
    for pid in sorted(counts):
        starts[pid] = acc
        acc += counts[pid]

    def number(batches):
        import pyarrow as pa
        from pyspark import TaskContext
        nxt = starts.get(TaskContext.get().partitionId(), 0)
        for b in batches:
            ids = arrow_array(np.arange(nxt, nxt + b.num_rows, dtype=np.int64))
            nxt += b.num_rows
            yield pa.RecordBatch.from_arrays(
                [ids, b.column(b.schema.get_field_index("length")),
                 b.column(b.schema.get_field_index("tokens")),
                 b.column(b.schema.get_field_index("count"))],
                names=["fgram_id", "length", "tokens", "count"])

    numbered = ordered.mapInArrow(number, "fgram_id long, length byte, tokens array<int>, count long")
    table_dir = os.path.join(staging, "fgrams")
    numbered.filter(F.col("fgram_id") < selected).write.mode("overwrite").option(
        "compression", "zstd").parquet(table_dir)
    for name in os.listdir(table_dir):  # Hadoop's checksum files and inner marker: not ours
        if name.endswith(".crc") or name == "_SUCCESS":
            os.remove(os.path.join(table_dir, name))
    for df in decoded:
        df.unpersist()
    ordered.unpersist()


def main(argv=None) -> None:
    """Entry point for `spark-submit fgram/jobs/build.py ...` (same options as `fgram build`)."""
    from fgram.cli import cli
    cli.main(args=["build", *(sys.argv[1:] if argv is None else argv)], prog_name="build.py")


if __name__ == "__main__":
    main()
