"""The driver of `fgram refresh`: the versioned root's checks and lock, what changed
(shards kept, new, removed), the passes over the store (`tasks`), the manifest and
store.json of the new version, publishing it and switching ``current``."""

from __future__ import annotations

import math
import time

from fgram.jobs.build.state import check_work_reach, fingerprint_digest, run_fingerprint
from fgram.jobs.executors import runs_here
from fgram.jobs.headstart import HeadStart, Starting
from fgram.jobs.progress import PROGRESS
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
from fgram.pipeline.config import BuildConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.formats.inputs import plan_shards, plan_units, shard_record
from fgram.pipeline.formats.reading import Shard
from fgram.pipeline.formats.table import table_record
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.locks import OutputLock
from fgram.pipeline.io.publish import finish, staging_for
from fgram.pipeline.io.storage import check_bucket, locate
from fgram.pipeline.io.workdir import load_json, save_json
from fgram.pipeline.kernels.keys import KeyCode
from fgram.pipeline.kernels.layout import group_slots
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.selection import add_length, selection
from fgram.pipeline.kernels.warmup import warm_up
from fgram.pipeline.records import PassRecord, TableManifest
from fgram.pipeline.tables import versions as vs

MERGE_BYTES = 256 * 2**20  # base volume read by one merge task
COMPACT = 0.25  # rewrite a length's base when its delta outgrows this share of it


def run_refresh(cfg: BuildConfig, keep: int = 3, spark=None, bound: bool = True) -> dict:
    """Refresh the versioned table at ``cfg.output``; returns a summary (and the new
    version's manifest under "manifest" when one was built). ``bound``: a refresh that
    only adds shards starts its thresholds at the current version's cutoff count (exact
    either way; False counts from --min-count, which scans more old units)."""
    t_start = time.time()
    cfg.validate()
    cfg, tokenizer = cfg.tokenized()  # `fgram tokenize` outputs say how to read them
    vs.check_keep(keep)  # before building, not after
    where = locate(cfg.output, cfg.storage)
    check_bucket(where)
    root = vs.check_root(where)
    with OutputLock(where):
        return _run_locked(cfg, keep, root, spark, t_start, bound, tokenizer)


def _staging(cfg: BuildConfig, root, vid: str):
    """A new version's staging folder: beside it on a local disk; for a root on an object
    store, this machine's cache when the tasks run here, else the store itself (a hidden
    folder in versions/, which every executor reaches and `clear_leftovers` removes)."""
    if isinstance(root, str) or not runs_here(cfg):
        return staging_for(vs.version_path(root, vid), here=False)
    # on this machine, one per root: the next run clears what a killed one left
    return staging_for(root.child(vs.VERSIONS, ".next"), here=True)


def rare_by_unit(entry: ShardEntry) -> dict[tuple[int, int], dict[int, str]]:
    """A kept shard's objects of positions without id: (start, stop) of a unit -> {w:
    its w-gram positions}; an entry of three values (an older store's) is of bigrams."""
    out: dict[tuple[int, int], dict[int, str]] = {}
    for start, stop, name, *w in entry.rare or []:
        out.setdefault((start, stop), {})[w[0] if w else 2] = name
    return out


def _run_locked(
    cfg: BuildConfig, keep: int, root, spark, t_start: float, use_bound: bool, tokenizer=None
) -> dict:
    vs.clear_leftovers(root)  # of a refresh killed before it could clean up
    previous = vs.current(root)
    shards = plan_shards(cfg.inputs, cfg.read_options())
    digest = fingerprint_digest(run_fingerprint(cfg, shards))
    code = store_code(shards)
    old_store = None
    if previous is not None:
        vpath = vs.version_path(root, previous)
        old = load_json(wf.join(vpath, "manifest.json"))
        if old.get("run_fingerprint") == digest:
            return {
                "version": previous,
                "previous": previous,
                "built": False,
                "pruned": vs.prune(root, keep),
                "collected": collect_garbage(root),
            }
        if wf.exists(wf.join(vpath, "store.json")):
            old_store = StoreRecord.from_json(load_json(wf.join(vpath, "store.json")))
            if old_store is not None and old_store.options != store_options(cfg, code):
                old_store = None  # other options: start the store afresh
    vid = vs.new_version_id(after=max(vs.list_versions(root), default=None))
    out = vs.version_path(root, vid)
    staging = _staging(cfg, root, vid)
    wf.remove_tree(staging)
    work = wf.join(staging, "_work")
    wf.make_dirs(work)
    wf.make_dirs(objects_dir(root))
    # Spark's JVM starts (seconds) while the driver plans and counts new units
    starting = Starting(cfg, spark, check=lambda ex: check_work_reach(cfg, ex))
    try:
        bound = (
            old.get("cutoff_count")
            if use_bound and old_store and old.get("fgrams") == cfg.size
            else None
        )
        manifest, store = _refresh(cfg, root, staging, shards, old_store, starting, code, bound)
        manifest.run_fingerprint = digest
        manifest.tokenizer = tokenizer
        assert manifest.refresh is not None
        manifest.refresh["previous"] = previous
        save_json(wf.join(staging, "store.json"), store.to_json())
        wf.remove_tree(work)
        manifest.seconds = round(time.time() - t_start, 3)
        record = manifest.to_json()
        finish(staging, out, record, new_folder=True)
        starting.wait()  # a warm-up job still running would be cut off at exit, noisily
        PROGRESS.end()  # the last stage's line
    except BaseException:
        starting.wait()
        wf.remove_tree(staging)
        raise
    vs.switch_current(root, vid)
    pruned = vs.prune(root, keep)
    return {
        "version": vid,
        "previous": previous,
        "built": True,
        "pruned": pruned,
        "collected": collect_garbage(root),
        "manifest": record,
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
    work = wf.join(staging, "_work")
    old_levels = old_store.levels if old_store else {}
    old_shards = old_store.shards if old_store else {}
    digests = [shard_digest(s) for s in shards]
    kept_idx = [i for i, d in enumerate(digests) if d in old_shards]
    new_idx = [i for i, d in enumerate(digests) if d not in old_shards]
    current = set(digests)
    removed = {d: e for d, e in old_shards.items() if d not in current}
    kept_shards = [shards[i] for i in kept_idx]
    new_shards = [shards[i] for i in new_idx]
    kept_units = plan_units(kept_shards, cfg.unit_tokens)
    rare = [rare_by_unit(old_shards[digests[i]]) for i in kept_idx]
    plan = RPlan(
        cfg,
        root,
        work,
        code,
        new_shards,
        plan_units(new_shards, cfg.unit_tokens),
        kept_shards,
        kept_units,
        {k: lv.table for k, lv in old_levels.items() if lv.table},
        [rare[u.shard].get((u.start, u.stop), {}) for u in kept_units],
    )
    warm_up()
    ex = HeadStart(starting, cfg.master, release=release_driver)
    timing = {"plan": round(time.time() - t_begin, 3)}
    entries = {
        d: ShardEntry(e.record, dict(e.totals), {k: list(v) for k, v in e.partials.items()}, e.rare)
        for d, e in old_shards.items()
        if d in current
    }
    new_entries = {
        digests[i]: ShardEntry(shard_record(shards[i]), {"documents": 0, "tokens": 0})
        for i in new_idx
    }
    # only shards added: the current version's S f-grams keep at least its cutoff count, so
    # the new cutoff is at least that, and nothing counted less can be an f-gram
    threshold = max(cfg.min_count, old_cutoff or 0) if not removed else cfg.min_count
    hists: dict[int, dict[int, int]] = {}
    levels: dict[int, Level] = {}
    passes = []
    old_size, scan_rows, done = 0, 0, False
    for k in range(2, cfg.max_len + 1):
        t0 = time.time()
        level = old_levels.get(k) or Level()
        floor = threshold
        # one job: the new units' counts (largest first), then the old units' scans
        todo = [("count", u) for u in range(len(plan.new_units))]
        n_scanned = len(plan.kept_units) if k > 2 and scan_rows else 0
        todo += [("scan", u) for u in range(n_scanned)]
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: count new, scan old units")
        counting = CountScanStage(plan, k, old_size, todo)
        done_now = counting.summary(ex.map_batched(len(todo), counting.run))
        stats, scans = done_now["counts"], done_now["scans"]
        fresh = [s.run for s in stats if s.run["n"]]
        for s in stats:
            unit = plan.new_units[s.unit]
            e = new_entries[digests[new_idx[unit.shard]]]
            e.partials.setdefault(k, []).append(s.run)
            if s.rare:
                e.rare = [*(e.rare or []), [unit.start, unit.stop, s.rare, k - 1]]
            if k == 2:
                e.totals["documents"] += s.documents
                e.totals["tokens"] += s.tokens
        scanned = []
        for r in scans:
            if r.run:
                scanned.append(r.run)
                d = digests[kept_idx[plan.kept_units[r.unit].shard]]
                entries[d].partials.setdefault(k, []).append(r.run)
        t_count = time.time()
        gone = [r for e in removed.values() for r in e.partials.get(k, [])]
        base_n = sum(piece["n"] for piece in level.base)
        change = sum(r["n"] for r in level.delta + fresh + scanned + gone)
        compact = base_n == 0 or change > COMPACT * base_n
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: merge, ids")
        rounds = math.ceil((base_n + change) * 16 / MERGE_BYTES / ex.parallelism)
        nparts = ex.parallelism * max(rounds, 1)  # no lone last round
        merging = MergeStage(plan, k, nparts, floor, level, fresh, scanned, gone, compact)
        merged = ex.map_batched(nparts, merging.run)
        pieces = sorted((m.piece for m in merged if m.piece), key=lambda x: x["lo"])
        new_level = Level(pieces, []) if compact else Level(level.base, pieces)
        t_merge = time.time()
        if not done:
            threshold = add_length(hists, k, [m.hist for m in merged], cfg.size, threshold)
        kept = sum(hists.get(k, {}).values()) if not done else 0
        tabling = TableStage(plan, k, nparts, threshold if not done else 2**62)
        tab = ex.map(1, tabling.run)[0]
        new_level.table = tab.table
        if tab.table:
            plan.tables[k] = tab.table
        if tab.table and tab.table["size"] * (24 + 4 * k) > max(cfg.broadcast_budget, 1):
            raise ConfigError(
                f"refresh: the id table of {k}-grams ({tab.table['size']} rows) "
                f"exceeds --broadcast-budget; raise it, or use `fgram build`"
            )
        old_size, scan_rows = tab.old_size, tab.scan_rows
        levels[k] = new_level
        passes.append(
            PassRecord(
                length=k,
                count_threshold=floor,
                threshold=threshold,
                candidates=sum(s.counted for s in stats),
                kept=kept,
                partitions=nparts,
                new_units=len(plan.new_units),
                scanned_units=n_scanned,
                scanned_at_rare=sum(r.at_rare for r in scans),
                scanned_at_anchors=sum(r.at_anchors for r in scans),
                scanned_grams=sum(r["n"] for r in scanned),
                ids_added=tab.added,
                ids=(tab.table or {}).get("size", 0),
                delta=sum(m.delta for m in merged),
                compacted=compact,
                seconds=round(time.time() - t0, 3),
                task_seconds=done_now["task_seconds"],
                stages={
                    "count": round(t_count - t0, 3),
                    "merge": round(t_merge - t_count, 3),
                    "table": round(time.time() - t_merge, 3),
                },
            )
        )
        done = done or kept == 0
    entries.update(new_entries)
    totals = {
        "documents": sum(e.totals["documents"] for e in entries.values()),
        "tokens": sum(e.totals["tokens"] for e in entries.values()),
    }
    if totals["tokens"] == 0:
        raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")
    t0 = time.time()
    PROGRESS.stage("select")
    cutoff, cut_len, selected, by_len = selection(hists, cfg.size)
    groups = Groups(hists, cutoff, cut_len)
    task_firsts = group_slots(groups, ex.parallelism, selected, cfg.rank_rows)
    out_dir = wf.join(staging, "fgrams")
    wf.make_dirs(out_dir)
    ranking = RankStage(plan, sorted(hists), groups, task_firsts, selected, out_dir)
    ex.map(len(task_firsts), ranking.run)
    store = StoreRecord(options=store_options(cfg, code), levels=levels, shards=entries)
    manifest = TableManifest(
        engine=ex.name,
        config=cfg.record(),
        inputs=[shard_record(s) for s in shards],
        totals=totals,
        passes=passes,
        cutoff_count=cutoff if selected else None,
        fgrams=selected,
        by_length={str(k): n for k, n in sorted(by_len.items())},
        select={"seconds": round(time.time() - t0, 3), "rank_tasks": len(task_firsts)},
        seconds=0.0,  # set when it is published
        table=table_record(),
        timing=timing,
        head_start_tasks=ex.in_driver,
        executor_start_seconds=starting.seconds,
        refresh={
            "new_shards": len(new_shards),
            "kept_shards": len(kept_shards),
            "removed_shards": len(removed),
            "store_reused": bool(old_levels),
        },
    )
    return manifest, store
