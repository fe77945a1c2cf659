"""The driver of `fgram refresh`: the versioned root's checks and lock, what changed
(shards kept, new, removed), the passes over the store (`tasks`), the manifest and
store.json of the new version, publishing it and switching ``current``."""

from __future__ import annotations

import math
import time

from fgram.jobs.build.select import rank_split
from fgram.jobs.build.state import check_work_reach, fingerprint_digest, run_fingerprint
from fgram.jobs.executors import runs_here
from fgram.jobs.headstart import HeadStart, Starting
from fgram.jobs.progress import PROGRESS
from fgram.jobs.refresh.store import (
    collect_garbage,
    objects_dir,
    shard_digest,
    store_code,
    store_options,
)
from fgram.jobs.refresh.tasks import (
    RPlan,
    count_task,
    merge_task,
    rank_task,
    release_driver,
    scan_task,
    table_task,
)
from fgram.pipeline import versions as vs
from fgram.pipeline import workdir as wf
from fgram.pipeline.config import BuildConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.inputs import plan_shards, plan_units, shard_record
from fgram.pipeline.keys import KeyCode
from fgram.pipeline.publish import OutputLock, finish, staging_for
from fgram.pipeline.reading import Shard
from fgram.pipeline.selection import add_length, selection
from fgram.pipeline.storage import check_bucket, locate
from fgram.pipeline.table import Groups, table_record
from fgram.pipeline.warmup import warm_up
from fgram.pipeline.workdir import load_json, save_json
from fgram.version import __version__

MERGE_BYTES = 256 * 2**20  # base volume read by one merge task
COMPACT = 0.25  # rewrite a length's base when its delta outgrows this share of it


def _empty_level() -> dict:
    return {"table": None, "base": [], "delta": []}


def run_refresh(cfg: BuildConfig, keep: int = 3, spark=None, bound: bool = True) -> dict:
    """Refresh the versioned table at ``cfg.output``; returns a summary (and the new
    version's manifest under "manifest" when one was built). ``bound``: a refresh that
    only adds shards starts its thresholds at the current version's cutoff count (exact
    either way; False counts from --min-count, which scans more old units)."""
    t_start = time.time()
    cfg.validate()
    vs.check_keep(keep)  # before building, not after
    where = locate(cfg.output, cfg.storage)
    check_bucket(where)
    root = vs.check_root(where)
    with OutputLock(where):
        return _run_locked(cfg, keep, root, spark, t_start, bound)


def _staging(cfg: BuildConfig, root, vid: str):
    """A new version's staging folder: beside it on a local disk; for a root on an object
    store, this machine's cache when the tasks run here, else the store itself (a hidden
    folder in versions/, which every executor reaches and `clear_leftovers` removes)."""
    if isinstance(root, str) or not runs_here(cfg):
        return staging_for(vs.version_path(root, vid), here=False)
    # on this machine, one per root: the next run clears what a killed one left
    return staging_for(root.child(vs.VERSIONS, ".next"), here=True)


def _run_locked(cfg: BuildConfig, keep: int, root, spark, t_start: float, use_bound: bool) -> dict:
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
            old_store = load_json(wf.join(vpath, "store.json"))
            if old_store.get("options") != store_options(cfg, code):
                old_store = None  # other options: start the store afresh
    vid = vs.new_version_id()
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
        manifest["run_fingerprint"] = digest
        manifest["refresh"]["previous"] = previous
        save_json(wf.join(staging, "store.json"), store)
        wf.remove_tree(work)
        manifest["seconds"] = round(time.time() - t_start, 3)
        finish(staging, out, manifest, new_folder=True)
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
        "manifest": manifest,
    }


def _refresh(
    cfg: BuildConfig,
    root,
    staging,
    shards: list[Shard],
    old_store: dict | None,
    starting: Starting,
    code: KeyCode,
    old_cutoff: int | None = None,
) -> tuple[dict, dict]:
    """``code``: the store's keys (`store_code` of ``shards``); ``old_cutoff``: the cutoff
    count of the version ``old_store`` belongs to, when that version held S f-grams
    (None otherwise)."""
    t_begin = time.time()
    work = wf.join(staging, "_work")
    old_store = old_store or {"levels": {}, "shards": {}}
    old_levels = {int(k): v for k, v in old_store["levels"].items()}
    digests = [shard_digest(s) for s in shards]
    kept_idx = [i for i, d in enumerate(digests) if d in old_store["shards"]]
    new_idx = [i for i, d in enumerate(digests) if d not in old_store["shards"]]
    current = set(digests)
    removed = {d: e for d, e in old_store["shards"].items() if d not in current}
    kept_shards = [shards[i] for i in kept_idx]
    new_shards = [shards[i] for i in new_idx]
    kept_units = plan_units(kept_shards, cfg.unit_tokens)
    rare = [
        {(a, b): name for a, b, name in old_store["shards"][digests[i]].get("rare", [])}
        for i in kept_idx
    ]
    plan = RPlan(
        cfg,
        root,
        work,
        code,
        new_shards,
        plan_units(new_shards, cfg.unit_tokens),
        kept_shards,
        kept_units,
        {k: lv["table"] for k, lv in old_levels.items() if lv["table"]},
        [rare[u.shard].get((u.start, u.stop)) for u in kept_units],
    )
    warm_up()
    ex = HeadStart(starting, cfg.master, release=release_driver)
    timing = {"plan": round(time.time() - t_begin, 3)}
    entries = {
        d: {
            "record": e["record"],
            "totals": e["totals"],
            "partials": {k: list(v) for k, v in e["partials"].items()},
            **({"rare": e["rare"]} if "rare" in e else {}),
        }
        for d, e in old_store["shards"].items()
        if d in current
    }
    new_entries: dict[str, dict] = {
        digests[i]: {
            "record": shard_record(shards[i]),
            "totals": {"documents": 0, "tokens": 0},
            "partials": {},
        }
        for i in new_idx
    }
    # only shards added: the current version's S f-grams keep at least its cutoff count, so
    # the new cutoff is at least that, and nothing counted less can be an f-gram
    threshold = max(cfg.min_count, old_cutoff or 0) if not removed else cfg.min_count
    hists: dict[int, dict[int, int]] = {}
    levels: dict[int, dict] = {}
    passes = []
    old_size, scan_rows, done = 0, 0, False
    for k in range(2, cfg.max_len + 1):
        t0 = time.time()
        level = old_levels.get(k, _empty_level())
        floor = threshold
        # one job: the new units' counts (largest first), then the old units' scans, in
        # batches (a scan is short next to a Spark task's launch)
        todo = [("count", u) for u in range(len(plan.new_units))]
        n_scanned = len(plan.kept_units) if k > 2 and scan_rows else 0
        todo += [("scan", u) for u in range(n_scanned)]
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: count new, scan old units")
        done_now = ex.map_batched(
            len(todo),
            lambda i, k=k, o=old_size, todo=todo: (
                count_task(plan, k, todo[i][1])
                if todo[i][0] == "count"
                else scan_task(plan, k, todo[i][1], o)
            ),
        )
        stats = [r for (kind, _), r in zip(todo, done_now, strict=True) if kind == "count"]
        fresh = [s["run"] for s in stats if s["run"]["n"]]
        for s in stats:
            unit = plan.new_units[s["unit"]]
            e = new_entries[digests[new_idx[unit.shard]]]
            e["partials"].setdefault(str(k), []).append(s["run"])
            if s["rare"]:
                e.setdefault("rare", []).append([unit.start, unit.stop, s["rare"]])
            if k == 2:
                e["totals"]["documents"] += s["documents"]
                e["totals"]["tokens"] += s["tokens"]
        scanned = []
        for (kind, u), r in zip(todo, done_now, strict=True):
            if kind == "scan" and r["run"]:
                scanned.append(r["run"])
                d = digests[kept_idx[plan.kept_units[u].shard]]
                entries[d]["partials"].setdefault(str(k), []).append(r["run"])
        t_count = time.time()
        gone = [r for e in removed.values() for r in e["partials"].get(str(k), [])]
        base_n = sum(piece["n"] for piece in level["base"])
        change = sum(r["n"] for r in level["delta"] + fresh + scanned + gone)
        compact = base_n == 0 or change > COMPACT * base_n
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: merge, ids")
        rounds = math.ceil((base_n + change) * 16 / MERGE_BYTES / ex.parallelism)
        nparts = ex.parallelism * max(rounds, 1)  # no lone last round
        merged = ex.map_batched(
            nparts,
            lambda p, k=k, n=nparts, f=floor, lv=level, c=compact, runs=(fresh, scanned, gone): (
                merge_task(plan, k, p, n, f, lv, *runs, c)
            ),
        )
        pieces = sorted((m["piece"] for m in merged if m["piece"]), key=lambda x: x["lo"])
        new_level = (
            {"base": pieces, "delta": []} if compact else {"base": level["base"], "delta": pieces}
        )
        t_merge = time.time()
        if not done:
            threshold = add_length(hists, k, [m["hist"] for m in merged], cfg.size, threshold)
        kept = sum(hists.get(k, {}).values()) if not done else 0
        tab = ex.map(
            1,
            lambda _, k=k, n=nparts, t=threshold if not done else 2**62: table_task(plan, k, n, t),
        )[0]
        new_level["table"] = tab["table"]
        if tab["table"]:
            plan.tables[k] = tab["table"]
        if tab["table"] and tab["table"]["size"] * (24 + 4 * k) > max(cfg.broadcast_budget, 1):
            raise ConfigError(
                f"refresh: the id table of {k}-grams ({tab['table']['size']} rows) "
                f"exceeds --broadcast-budget; raise it, or use `fgram build`"
            )
        old_size, scan_rows = tab["old_size"], tab["scan_rows"]
        levels[k] = new_level
        passes.append(
            {
                "length": k,
                "count_threshold": floor,
                "threshold": threshold,
                "candidates": sum(s["counted"] for s in stats),
                "kept": kept,
                "partitions": nparts,
                "new_units": len(plan.new_units),
                "scanned_units": n_scanned,
                "scanned_at_rare": sum(r.get("at_rare", False) for r in done_now),
                "scanned_at_anchors": sum(r.get("at_anchors", False) for r in done_now),
                "scanned_grams": sum(r["n"] for r in scanned),
                "ids_added": tab["added"],
                "ids": (tab["table"] or {}).get("size", 0),
                "delta": sum(m["delta"] for m in merged),
                "compacted": compact,
                "seconds": round(time.time() - t0, 3),
                "task_seconds": {
                    kind: round(
                        sum(
                            r["seconds"]
                            for (w, _), r in zip(todo, done_now, strict=True)
                            if w == kind
                        ),
                        3,
                    )
                    for kind in ("count", "scan")
                },
                "stages": {
                    "count": round(t_count - t0, 3),
                    "merge": round(t_merge - t_count, 3),
                    "table": round(time.time() - t_merge, 3),
                },
            }
        )
        done = done or kept == 0
    entries.update(new_entries)
    totals = {
        "documents": sum(e["totals"]["documents"] for e in entries.values()),
        "tokens": sum(e["totals"]["tokens"] for e in entries.values()),
    }
    if totals["tokens"] == 0:
        raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")
    t0 = time.time()
    PROGRESS.stage("select")
    cutoff, cut_len, selected, by_len = selection(hists, cfg.size)
    groups = Groups(hists, cutoff, cut_len)
    task_firsts = rank_split(groups, ex.parallelism, selected)
    lengths = sorted(hists)
    out_dir = wf.join(staging, "fgrams")
    wf.make_dirs(out_dir)
    ex.map(
        len(task_firsts),
        lambda r: rank_task(plan, r, lengths, groups, task_firsts, selected, out_dir),
    )
    store = {
        "options": store_options(cfg, code),
        "fgram_version": __version__,
        "levels": {str(k): v for k, v in levels.items()},
        "shards": entries,
    }
    manifest = {
        "fgram_version": __version__,
        "kind": "fgram-table",
        "engine": ex.name,
        "config": cfg.record(),
        "inputs": [shard_record(s) for s in shards],
        "totals": totals,
        "passes": passes,
        "cutoff_count": cutoff if selected else None,
        "fgrams": selected,
        "by_length": {str(k): n for k, n in sorted(by_len.items())},
        "select": {"seconds": round(time.time() - t0, 3), "rank_tasks": len(task_firsts)},
        "timing": timing,
        "refresh": {
            "new_shards": len(new_shards),
            "kept_shards": len(kept_shards),
            "head_start_tasks": ex.in_driver,
            "executor_start_seconds": starting.seconds,
            "removed_shards": len(removed),
            "store_reused": bool(old_levels),
        },
        "table": table_record(),
    }
    return manifest, store
