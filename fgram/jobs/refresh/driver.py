"""The driver of `fgram refresh`: the versioned root's checks and lock, what changed
(shards kept, new, removed), the passes over the store (`tasks`), the manifest and
store.json of the new version, publishing it and switching ``current``."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from fgram.jobs import sequence
from fgram.jobs.engines import runs_here
from fgram.jobs.headstart import HeadStart, Starting
from fgram.jobs.passes import Merged, PassSteps, check_tokens, run_passes, select, table_manifest
from fgram.jobs.refresh.remembered import same_map, settled
from fgram.jobs.refresh.serve import carry_serving, check_model
from fgram.jobs.refresh.stages import CountScanStage, MergeStage, RankStage, TableStage
from fgram.jobs.refresh.store import (
    Level,
    ShardEntry,
    StoreRecord,
    collect_garbage,
    objects_dir,
    shard_digest,
    store_code,
    store_options,
)
from fgram.jobs.refresh.tasks import RPlan, release_driver
from fgram.jobs.runs import check_work_reach, fingerprint_digest, run_fingerprint
from fgram.jobs.sequence import Job, Run, begin
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.config.options import KEEP_VERSIONS
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.inputs import plan_shards, plan_units, shard_record, tokens_of
from fgram.pipeline.formats.reading import Shard
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.locks import OutputLock
from fgram.pipeline.io.publish import staging_for
from fgram.pipeline.io.storage import Location, check_bucket
from fgram.pipeline.io.workdir import load_json, save_json
from fgram.pipeline.kernels.keys import KeyCode
from fgram.pipeline.kernels.layout import group_slots
from fgram.pipeline.kernels.warmup import warm_up
from fgram.pipeline.records import PassRecord, TableManifest
from fgram.pipeline.tables import versions as vs
from fgram.pipeline.text.tokenizer import check_tokenizer

MERGE_BYTES = 256 * 2**20  # base volume read by one merge task
COMPACT = 0.25  # rewrite a length's base when its delta outgrows this share of it


def run_refresh(
    cfg: BuildConfig,
    keep: int = KEEP_VERSIONS,
    spark=None,
    bound: bool = True,
    given: Collection[str] | None = None,
    rebuild: bool = False,
    model: str | None = None,
) -> dict:
    """Refresh the versioned table at ``cfg.output``; returns a summary (and the new
    version's manifest under "manifest" when one was built). ``bound``: a refresh that
    only adds shards starts its thresholds at the current version's cutoff count (exact
    either way; False counts from --min-count, which scans more old units). ``given``:
    the options the caller set (the others are taken from the current version; None:
    all); ``rebuild``: options other than the current version's start it afresh
    (`remembered.settle_options`)."""
    t_start = time.time()
    job = RefreshJob(begin(cfg, spark), spark, keep, bound, given, rebuild, model, t_start)
    ended = sequence.run(job)
    return {**(job.summary or ended), "rebuilt": job.current.rebuilt}


def reusable_store(root, previous: str, cfg: BuildConfig, code: KeyCode) -> StoreRecord | None:
    """The current version's store, when this run can build on it: the same store
    options and key code (other options, or wider tokens, start the store afresh)."""
    path = vs.version_path(root, previous).child("store.json")
    if not wf.exists(path):
        return None
    store = StoreRecord.from_json(load_json(path))
    return store if store is not None and store.options == store_options(cfg, code) else None


def _staging(cfg: BuildConfig, root: Location, vid: str):
    """A new version's staging folder: beside it on a local disk; for a root on an object
    store, this machine's cache when the tasks run here, else the store itself (a hidden
    folder in versions/, which every executor reaches and `clear_leftovers` removes)."""
    if not wf.on_store(root) or not runs_here(cfg):
        return staging_for(root.child(vs.VERSIONS, vid), runs_here=False)
    # on this machine, one per root: the next run clears what a killed one left
    return staging_for(root.child(vs.VERSIONS, ".next"), runs_here=True)


def rare_by_unit(entry: ShardEntry) -> dict[tuple[int, int], dict[int, str]]:
    """A kept shard's objects of positions without id: (start, stop) of a unit -> {w:
    its w-gram positions}; an entry of three values (an older store's) is of bigrams."""
    out: dict[tuple[int, int], dict[int, str]] = {}
    for start, stop, name, *w in entry.rare or []:
        out.setdefault((start, stop), {})[w[0] if w else 2] = name
    return out


class RefreshJob(Job):
    """`fgram refresh` in the run sequence. Its lock is the refresh folder's (which holds
    versions: no overwrite); its plan settles the options against the current version
    and ends the run when nothing changed, before any executor starts; the new version
    is staged (a folder no reader knows), published, carried the serving parts of the
    current one, and made current; older ones are pruned and unnamed objects collected."""

    what = "refresh"
    plans_first = True
    new_folder = True

    def __init__(self, cfg, spark, keep, bound, given, rebuild, model, t_start) -> None:
        super().__init__(cfg, spark)
        self.keep, self.use_bound, self.given, self.rebuild = keep, bound, given, rebuild
        self.model, self.t_start = model, t_start
        self.summary: dict | None = None

    def check(self) -> None:
        self.cfg, self.tokenizer = self.cfg.tokenized()  # `fgram tokenize` outputs say how
        vs.check_keep(self.keep)  # before building, not after
        self.where = self.cfg.output
        check_bucket(self.where)
        self.root = vs.check_root(self.where)

    def output(self):
        return self.where

    @contextlib.contextmanager
    def lock(self, where):
        with OutputLock(where):
            yield where

    def check_executor(self, ex) -> None:
        check_work_reach(self.cfg, ex)

    def places(self, out):
        """The new version's staging folder; its id, after the newest (the folder of
        versions is the output)."""
        self.vid = vs.new_version_id(after=max(vs.list_versions(out), default=None))
        return _staging(self.cfg, out, self.vid)

    def plan(self) -> dict | None:
        root = self.root
        vs.clear_leftovers(root)  # of a refresh killed before it could clean up
        self.current = current = settled(self.cfg, root, self.given, self.rebuild, self.where.uri)
        previous, old = current.previous, current.manifest or {}
        self.cfg, self.canonical = same_map(current.cfg, old, current.rebuilt, self.tokenizer)
        cfg = self.cfg
        self.shards = plan_shards(cfg.inputs, cfg.read_options())
        self.digest = fingerprint_digest(run_fingerprint(cfg, self.shards))
        self.code = store_code(self.shards)
        self.old_store = None
        if previous is not None:
            where = f"its current version {previous}"
            check_tokenizer(old, self.tokenizer, ", ".join(cfg.inputs), where)
            if old.get("run_fingerprint") == self.digest:
                return {
                    "version": previous,
                    "previous": previous,
                    "built": False,
                    "fingerprint": self.digest,
                    "manifest": old,
                    "pruned": vs.prune(root, self.keep),
                    "collected": collect_garbage(root),
                }
            self.old_store = reusable_store(root, previous, cfg, self.code)
            check_model(root, previous, self.model)  # before counting: its embeddings need one
        return None

    def claim(self, staging) -> bool:
        staging.remove_tree()
        wf.make_dirs(staging.child("_work"))
        wf.make_dirs(objects_dir(self.root))
        return False

    def stages(self, run: Run) -> dict:
        cfg, old = self.cfg, self.current.manifest or {}
        bound = (
            old.get("cutoff_count")
            if self.use_bound and self.old_store and old.get("fgrams") == cfg.size
            else None
        )
        assert run.starting is not None
        manifest, store = _refresh(
            cfg, self.root, run.staging, self.shards, self.old_store, run.starting, self.code, bound
        )
        manifest.run_fingerprint = self.digest
        manifest.tokenizer = self.tokenizer
        manifest.canonical = self.canonical
        assert manifest.refresh is not None
        manifest.refresh["previous"] = self.current.previous
        save_json(run.staging.child("store.json"), store.to_json())
        manifest.seconds = round(time.time() - self.t_start, 3)
        return manifest.to_json()

    def target(self, out):
        return vs.version_path(self.root, self.vid)

    def failed(self) -> None:
        with contextlib.suppress(Exception):  # noqa: BLE001 - a store that stopped
            collect_garbage(self.root)  # this run's objects: no version names them

    def published(self, manifest: dict) -> None:
        cfg, root, vid, previous = self.cfg, self.root, self.vid, self.current.previous
        carried = carry_serving(cfg, root, previous, vid, self.spark, self.model)  # first
        vs.switch_current(root, vid)
        # other options: the old versions stay
        pruned = [] if self.current.rebuilt else vs.prune(root, self.keep)
        self.summary = {
            "version": vid,
            "previous": previous,
            "built": True,
            "carried": carried,
            "fingerprint": self.digest,
            "pruned": pruned,
            "collected": collect_garbage(root),
            "manifest": manifest,
        }


@dataclass
class Changes:
    """The input shards against the store's: kept (same digest), new, removed."""

    digests: list[str]
    kept_idx: list[int]
    new_idx: list[int]
    removed: dict[str, ShardEntry]

    @classmethod
    def of(cls, shards: list[Shard], old_shards: dict[str, ShardEntry]) -> Changes:
        digests = [shard_digest(s) for s in shards]
        current = set(digests)
        return cls(
            digests,
            [i for i, d in enumerate(digests) if d in old_shards],
            [i for i, d in enumerate(digests) if d not in old_shards],
            {d: e for d, e in old_shards.items() if d not in current},
        )


def _plan(
    cfg: BuildConfig, root, work, shards: list[Shard], old_store: StoreRecord | None, code: KeyCode
) -> tuple[RPlan, Changes]:
    old_shards = old_store.shards if old_store else {}
    changes = Changes.of(shards, old_shards)
    kept_shards = [shards[i] for i in changes.kept_idx]
    new_shards = [shards[i] for i in changes.new_idx]
    kept_units = plan_units(kept_shards, cfg.unit_tokens)
    rare = [rare_by_unit(old_shards[changes.digests[i]]) for i in changes.kept_idx]
    plan = RPlan(
        cfg,
        root,
        work,
        code,
        new_shards,
        plan_units(new_shards, cfg.unit_tokens),
        kept_shards,
        kept_units,
        {k: lv.table for k, lv in (old_store.levels if old_store else {}).items() if lv.table},
        [rare[u.shard].get((u.start, u.stop), {}) for u in kept_units],
    )
    return plan, changes


@dataclass
class RefreshPasses(PassSteps):
    """A refresh's pass k: count the new units and scan the kept ones, merge the store's
    level of length k with them, extend its id table. Every length's level is merged,
    also past the last length that kept any (the store keeps every length's counts)."""

    count_label = "count new, scan old units"
    merge_label = "merge, ids"
    last_stage = "table"
    stops_when_empty = False

    ex: Any
    plan: RPlan
    changes: Changes
    old_levels: dict[int, Level]
    entries: dict[str, ShardEntry]  # the kept shards' (partials grow)
    new_entries: dict[str, ShardEntry]
    hists: dict[int, dict[int, int]]
    levels: dict[int, Level] = field(default_factory=dict)
    old_size: int = 0  # T_{k-1}'s ids before this refresh
    scan_rows: int = 0  # rows of T_{k-1} new in this refresh (the kept units' scans)

    def count(self, k: int, floor: int) -> tuple[dict, list[dict], list[dict], int]:
        plan, digests = self.plan, self.changes.digests
        # one job: the new units' counts (largest first), then the old units' scans
        todo = [("count", u) for u in range(len(plan.new_units))]
        n_scanned = len(plan.kept_units) if k > 2 and self.scan_rows else 0
        todo += [("scan", u) for u in range(n_scanned)]
        counting = CountScanStage(plan, k, self.old_size, todo)
        done = counting.summary(self.ex.map_batched(len(todo), counting.run))
        for s in done["counts"]:
            unit = plan.new_units[s.unit]
            e = self.new_entries[digests[self.changes.new_idx[unit.shard]]]
            e.partials.setdefault(k, []).append(s.run)
            if s.rare:
                e.rare = [*(e.rare or []), [unit.start, unit.stop, s.rare, k - 1]]
            if k == 2:
                e.totals["documents"] += s.documents
                e.totals["tokens"] += s.tokens
        scanned = []
        for r in done["scans"]:
            if r.run:
                scanned.append(r.run)
                d = digests[self.changes.kept_idx[plan.kept_units[r.unit].shard]]
                self.entries[d].partials.setdefault(k, []).append(r.run)
        fresh = [s.run for s in done["counts"] if s.run["n"]]
        return done, fresh, scanned, n_scanned

    def merge(self, k: int, floor: int, counted: tuple[dict, list, list, int]) -> Merged:
        _, fresh, scanned, _ = counted
        level = self.old_levels.get(k) or Level()
        gone = [r for e in self.changes.removed.values() for r in e.partials.get(k, [])]
        base_n = sum(piece["n"] for piece in level.base)
        change = sum(r["n"] for r in level.delta + fresh + scanned + gone)
        compact = base_n == 0 or change > COMPACT * base_n
        rounds = math.ceil((base_n + change) * 16 / MERGE_BYTES / self.ex.parallelism)
        nparts = self.ex.parallelism * max(rounds, 1)  # no lone last round
        merging = MergeStage(self.plan, k, nparts, floor, level, fresh, scanned, gone, compact)
        merged = self.ex.map_batched(nparts, merging.run)
        pieces = sorted((m.piece for m in merged if m.piece), key=lambda x: x["lo"])
        self.levels[k] = Level(pieces, []) if compact else Level(level.base, pieces)
        return Merged([m.hist for m in merged], (merged, nparts, compact))

    def keep(
        self, k: int, threshold: int | None, counted: tuple[dict, list, list, int], merged: Merged
    ) -> tuple[int, dict]:
        done, _, scanned, n_scanned = counted
        results, nparts, compact = merged.result
        cfg = self.plan.cfg
        kept = sum(self.hists.get(k, {}).values()) if threshold is not None else 0
        tabling = TableStage(self.plan, k, nparts, 2**62 if threshold is None else threshold)
        tab = self.ex.map(1, tabling.run)[0]
        self.levels[k].table = tab.table
        if tab.table:
            self.plan.tables[k] = tab.table
        if tab.table and tab.table["size"] * (24 + 4 * k) > max(cfg.broadcast_budget, 1):
            raise ConfigError(
                f"refresh: the id table of {k}-grams ({tab.table['size']} rows) "
                f"exceeds --broadcast-budget; raise it, or use `fgram build`"
            )
        self.old_size, self.scan_rows = tab.old_size, tab.scan_rows
        scans = done["scans"]
        return kept, {
            "candidates": sum(s.counted for s in done["counts"]),
            "partitions": nparts,
            "new_units": len(self.plan.new_units),
            "scanned_units": n_scanned,
            "scanned_at_rare": sum(r.at_rare for r in scans),
            "scanned_at_anchors": sum(r.at_anchors for r in scans),
            "scanned_grams": sum(r["n"] for r in scanned),
            "ids_added": tab.added,
            "ids": (tab.table or {}).get("size", 0),
            "delta": sum(m.delta for m in results),
            "compacted": compact,
            "task_seconds": done["task_seconds"],
        }


def _refresh(
    cfg: BuildConfig,
    root,
    staging,
    shards: list[Shard],
    old_store: StoreRecord | None,
    starting: Starting,
    code: KeyCode,
    old_cutoff: int | None = None,
) -> tuple[TableManifest, StoreRecord]:
    """``code``: the store's keys (`store_code` of ``shards``); ``old_cutoff``: the cutoff
    count of the version ``old_store`` belongs to, when that version held S f-grams
    (None otherwise)."""
    t_begin = time.time()
    plan, changes = _plan(cfg, root, staging.child("_work"), shards, old_store, code)
    warm_up()
    ex = HeadStart(starting, cfg.master, release=release_driver)
    ex.fit(  # the new units counted, the kept ones scanned
        tokens_of(plan.new_shards, plan.new_units) + tokens_of(plan.kept_shards, plan.kept_units)
    )
    timing = {"plan": round(time.time() - t_begin, 3)}
    old_shards = old_store.shards if old_store else {}
    current = set(changes.digests)
    entries = {
        d: ShardEntry(e.record, dict(e.totals), {k: list(v) for k, v in e.partials.items()}, e.rare)
        for d, e in old_shards.items()
        if d in current
    }
    new_entries = {
        changes.digests[i]: ShardEntry(shard_record(shards[i]), {"documents": 0, "tokens": 0})
        for i in changes.new_idx
    }
    # only shards added: the current version's S f-grams keep at least its cutoff count, so
    # the new cutoff is at least that, and nothing counted less can be an f-gram
    floor = max(cfg.min_count, old_cutoff or 0) if not changes.removed else cfg.min_count
    hists: dict[int, dict[int, int]] = {}
    passes: list[PassRecord] = []
    old_levels = old_store.levels if old_store else {}
    steps = RefreshPasses(ex, plan, changes, old_levels, entries, new_entries, hists)
    run_passes(steps, cfg, hists, passes, threshold=floor)
    entries.update(new_entries)
    totals = {
        "documents": sum(e.totals["documents"] for e in entries.values()),
        "tokens": sum(e.totals["tokens"] for e in entries.values()),
    }
    check_tokens(cfg, totals)
    t0 = time.time()
    chosen = select(hists, cfg.size)
    task_firsts = group_slots(chosen.groups, ex.parallelism, chosen.size, cfg.rank_rows)
    out_dir = staging.child("fgrams")
    wf.make_dirs(out_dir)
    ranking = RankStage(plan, sorted(hists), chosen.groups, task_firsts, chosen.size, out_dir)
    ex.map(len(task_firsts), ranking.run)
    store = StoreRecord(options=store_options(cfg, code), levels=steps.levels, shards=entries)
    manifest = table_manifest(
        ex.name,
        cfg,
        shards,
        totals,
        passes,
        chosen,
        {"seconds": round(time.time() - t0, 3), "rank_tasks": len(task_firsts)},
        seconds=0.0,  # set when it is published
        timing=timing,
        head_start_tasks=ex.in_driver,
        executor_start_seconds=starting.seconds,
        refresh={
            "new_shards": len(plan.new_shards),
            "kept_shards": len(plan.kept_shards),
            "removed_shards": len(changes.removed),
            "store_reused": bool(old_levels),
        },
    )
    return manifest, store
