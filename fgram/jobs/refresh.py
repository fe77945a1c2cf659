"""fgram refresh: publish a new version of a table for a new input list, incrementally.

    fgram refresh OUT INPUT... [build options] [--keep N]

The input list is the whole new corpus (old shards, plus new ones, minus
removed or changed ones). The new version, ``OUT/versions/<id>/``, holds the
table that `fgram build` would make of that list, exactly; ``OUT/current`` is
switched to it atomically and versions beyond the newest ``--keep`` are
deleted (never the current one). Unchanged inputs and options: nothing is done.

Cost grows with the change, not the corpus. ``OUT/store/`` keeps, per length
k, the id table T_k (every k-gram ever frequent, with a stable id), every
shard's partial counts of the k-grams whose prefix and suffix have ids in
T_{k-1} (keyed by the shard's fingerprint: path, size, mtime, checksum), and
their aggregate (a base plus a delta of everything changed since). A refresh,
length by length:

1. counts only the new shards (the same compiled kernels as `fgram build`);
2. subtracts the partials of removed shards, adds the new ones to the delta,
   and reads totals as base + delta (the base is only read, not rewritten,
   until the delta outgrows a quarter of it);
3. finds the frequent set with the build's thresholds, and appends the
   k-grams that became frequent to T_k; a refresh that only adds shards
   starts its thresholds at the current version's cutoff count (every count
   can only grow, so the S f-grams it has keep at least that count): T_k gets
   only k-grams that can still be f-grams, and the margin the first version's
   lower thresholds left in the id tables spares most scans of old shards;
4. on old shards counts only what their partials lack: (k+1)-grams whose
   prefix or suffix got its id in step 3 (one compiled pass over the tokens
   that tests a hash set, then exact checks at the few hits). For 3-grams the
   pass visits only the positions of the unit's bigrams that had no id when
   it was counted (~3.5% of them here, kept in the store with its partials):
   a bigram that gets an id later can occur nowhere else.

Removing a shard subtracts its stored partials; a shard changed in place is
one removed and one new. Other options than the current version's (length,
min count, size, reading), or another key code (`store_code`: a shard of
wider tokens among 16-bit ones), start the store afresh. Each version's
``store.json`` names the objects it uses; objects no version names are
deleted with the pruned versions.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
import uuid
from dataclasses import dataclass

import numpy as np

from fgram import __version__
from fgram.jobs.build import (_SCRATCH, _selection, _Starting, add_length, fingerprint_digest,
                              rank_split, run_fingerprint, runs_here)
from fgram.jobs.executors import HeadStart, as_task
from fgram.jobs.progress import PROGRESS
from fgram.pipeline import kernels as kn
from fgram.pipeline import partials as pt
from fgram.pipeline import versions as vs
from fgram.pipeline.config import BuildConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.inputs import Shard, Unit, plan_shards, plan_units, read_unit, shard_record
from fgram.pipeline import workdir as wf
from fgram.pipeline.publish import OutputLock, finish, staging_path
from fgram.pipeline.storage import (Location, cache_dir, check_bucket, keep_copy, local_path,
                                    locate)
from fgram.pipeline.table import Groups, table_record, write_ranked
from fgram.pipeline.workdir import WorkDir, load_array, load_json, read_into, save_array, save_json

STORE_FORMAT = 3     # 3: the store's key code depends on the shards' token width
MERGE_BYTES = 256 * 2**20       # base volume read by one merge task
COMPACT = 0.25     # rewrite a length's base when its delta outgrows this share of it
STORE_OPTIONS = ("max_len", "min_count", "size", "column", "dtype", "doc_sep")


# ---------------------------------------------------------------- the store

def objects_dir(root):
    """The store's objects: below a local root a local path, else a `Location`."""
    return wf.join(root, "store", "objects")


def put(root, arr: np.ndarray) -> str:
    """Write an immutable object (a .npy file) into the store; returns its name. On an
    object store this machine keeps its copy in the cache (`storage.keep_copy`)."""
    name = f"{uuid.uuid4().hex}.npy"
    dest = wf.join(objects_dir(root), name)
    if isinstance(dest, Location) and not dest.local:
        tmp = os.path.join(cache_dir("remote"), f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        save_array(tmp, arr)
        dest.upload(tmp)
        keep_copy(dest, tmp)
    else:
        save_array(dest, arr)
    return name


def get(root, name: str, mmap: bool = True) -> np.ndarray:
    """An object of the store; from an object store through this machine's cache (the
    objects never change: each is fetched once per machine)."""
    src = wf.join(objects_dir(root), name)
    return load_array(local_path(src) if isinstance(src, Location) else src, mmap=mmap)


def shard_digest(shard: Shard) -> str:
    return hashlib.sha256(json.dumps(shard_record(shard), sort_keys=True).encode()).hexdigest()[:32]


def store_code(shards: list[Shard]) -> kn.KeyCode:
    """The store's key code: 32 bits of prefix id and 16 of last token when every shard
    is a flat file of 16-bit tokens (a unit's count then sorts one word per position:
    ~1.8x faster than 64-bit keys), else 32 + 32. Another code starts the store afresh."""
    small = bool(shards) and all(s.format == "flat" and np.dtype(s.dtype).itemsize <= 2
                                 for s in shards)
    return kn.KeyCode(32, 16 if small else 32)


def store_options(cfg: BuildConfig, code: kn.KeyCode) -> dict:
    rec = cfg.record()
    return {"format": STORE_FORMAT, **{k: rec[k] for k in STORE_OPTIONS},
            "key_bits": [code.prefix_bits, code.last_bits]}


def referenced(store) -> set[str]:
    """Every object name a version's store.json uses (any ``*.npy`` string in it, so
    that a store of another format keeps its objects too)."""
    if isinstance(store, dict):
        return set().union(*(referenced(v) for v in store.values())) if store else set()
    if isinstance(store, list):
        return set().union(*(referenced(v) for v in store)) if store else set()
    return {store} if isinstance(store, str) and store.endswith(".npy") else set()


def collect_garbage(root: str) -> int:
    """Delete objects that no finished version's store.json names (a crashed or
    pruned refresh's). Call with the refresh lock held. Returns how many."""
    keep: set[str] = set()
    for vid in vs.list_versions(root):
        path = wf.join(vs.version_path(root, vid), "store.json")
        if wf.exists(path):
            keep |= referenced(load_json(path))
    folder = objects_dir(root)
    doomed = [n for n in wf.names(folder) if n not in keep]
    for name in doomed:
        wf.remove(wf.join(folder, name))
    return len(doomed)


# ---------------------------------------------------------------- tasks

@dataclass
class RPlan:
    """What every task needs (shipped with the task closure: small)."""
    cfg: BuildConfig
    root: str | Location    # the refresh root: a local path, or a `Location` on an object store
    work: str | Location
    code: kn.KeyCode    # the store's keys (`store_code`)
    new_shards: list[Shard]
    new_units: list[Unit]
    kept_shards: list[Shard]
    kept_units: list[Unit]
    tables: dict        # length -> {"size", "chunks": [{"keys", "ids", "tokens", "n"}]} (current)
    kept_rare: list     # per kept unit: its rare-bigram positions' object (or None)


_TABLES: dict[tuple, pt.IdTable] = {}
MAX_CHUNKS = 8      # an id table's chunks (one per refresh that added ids) before one is merged


def _table(plan: RPlan, k: int) -> pt.IdTable:
    """T_k as the plan names it, read once per worker process."""
    t = plan.tables.get(k) or {"chunks": []}
    key = (plan.root, k, tuple(c["keys"] for c in t["chunks"]))
    if key not in _TABLES:
        if len(_TABLES) > 8:
            _TABLES.clear()
        _TABLES[key] = pt.IdTable(k, [tuple(get(plan.root, c[w], mmap=False)
                                            for w in ("keys", "ids", "tokens"))
                                      for c in t["chunks"]], plan.code)
    return _TABLES[key]


def _release_driver() -> None:
    """The driver runs no more tasks: give back its work arrays and cached id tables."""
    _SCRATCH.clear()
    _TABLES.clear()


def _put_run(root: str, keys, counts, **extra) -> dict:
    """A sorted (keys, counts) run written as two objects, with its length."""
    return {"keys": put(root, keys), "counts": put(root, counts), "n": len(keys), **extra}


def _put_chunk(root: str, keys, ids, tokens) -> dict:
    return {"keys": put(root, keys), "ids": put(root, ids), "tokens": put(root, tokens),
            "n": len(ids)}


def _unit_file(plan: RPlan, k: int, u: int, what: str) -> str:
    return WorkDir(plan.work).unit(k, u, what)


@as_task
def count_task(plan: RPlan, k: int, u: int) -> dict:
    """Count new unit u's candidate k-grams (prefix and suffix in T_{k-1})."""
    t0 = time.time()
    cfg = plan.cfg
    unit = plan.new_units[u]
    stream = read_unit(plan.new_shards[unit.shard], unit, cfg.read_options(),
                       overlap=cfg.max_len - 1, scratch=_SCRATCH)
    tokens = stream.tokens
    if k == 2:
        prev = tokens
    else:
        uniq = load_array(_unit_file(plan, k - 1, u, "uniq"), mmap=False)
        order = (read_into(_unit_file(plan, k - 1, u, "pos"), _SCRATCH, "prev_pos"),
                 read_into(_unit_file(plan, k - 1, u, "starts"), _SCRATCH, "prev_starts"))
        prev = kn.ids_at(_table(plan, k - 1).lookup(uniq), order, len(tokens), _SCRATCH)
    rare = put(plan.root, rare_bigrams(tokens, prev)) if k == 3 else None
    last = k == cfg.max_len
    uniq, counts, order, counted = kn.unit_table(prev, tokens, k, stream.limit, want_order=not last,
                                                 code=plan.code, scratch=_SCRATCH)
    if not last:
        save_array(_unit_file(plan, k, u, "uniq"), uniq)
        save_array(_unit_file(plan, k, u, "pos"), order[0])
        save_array(_unit_file(plan, k, u, "starts"), order[1])
    nz = counts > 0
    run = _put_run(plan.root, uniq[nz], counts[nz])
    return {"unit": u, "run": run, "documents": stream.documents, "tokens": stream.n_tokens,
            "counted": counted, "rare": rare, "seconds": time.time() - t0}


def rare_bigrams(tokens: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Where a unit's bigrams have no id (``ids``: bigram ids by position): the only
    places where a bigram can occur that gets an id later (id tables only grow), so
    a later refresh scans just these for new bigram ids, not the whole unit."""
    t = tokens
    at = np.flatnonzero((ids[:len(t) - 1] == kn.INVALID) & (t[:-1] != kn.INVALID)
                        & (t[1:] != kn.INVALID))
    return at.astype(np.uint32 if len(t) <= 2**32 else np.int64)   # 4 bytes unless huge units


@as_task
def scan_task(plan: RPlan, k: int, u: int, old_size: int) -> dict:
    """Count, in kept unit u, the k-grams it lacks: prefix or suffix new in T_{k-1}."""
    t0 = time.time()
    cfg = plan.cfg
    unit = plan.kept_units[u]
    rows = load_array(wf.join(plan.work, f"scan-{k - 1}.npy"), mmap=False)
    stream = read_unit(plan.kept_shards[unit.shard], unit, cfg.read_options(),
                       overlap=cfg.max_len - 1, scratch=_SCRATCH)
    tables = [_table(plan, j) for j in range(2, k)]
    rare = plan.kept_rare[u] if k == 3 else None
    starts = get(plan.root, rare) if rare is not None else pt.anchored_starts(stream.tokens, rows)
    keys, counts = pt.scan_unit(stream.tokens, stream.limit, k, pt.window_set(rows), tables,
                                old_size, starts)
    run = _put_run(plan.root, keys, counts) if len(keys) else None
    return {"unit": u, "run": run, "at_rare": rare is not None,
            "at_anchors": rare is None and starts is not None, "seconds": time.time() - t0}


def _slices(root: str, runs: list[dict], lo: int, hi: int | None, sign: int = 1):
    out = []
    for run in runs:
        keys, counts = pt.slice_run(get(root, run["keys"]), get(root, run["counts"]), lo, hi)
        if len(keys):
            out.append((keys, counts if sign > 0 else -counts.astype(np.int64)))
    return out


@as_task
def merge_task(plan: RPlan, k: int, p: int, nparts: int, floor: int, level: dict,
               fresh: list[dict], scanned: list[dict], removed: list[dict], compact: bool) -> dict:
    """Totals of key range p of length k: base + (old delta + new - removed + scanned).

    Writes the range's keys with total >= floor (and their new-shard counts)
    to the work folder; returns the range's histogram and its new base piece
    (``compact``) or delta piece."""
    root = plan.root
    lo, hi = kn.part_range(nparts, p)
    base = _slices(root, level["base"], lo, hi)
    if len(base) != 1:      # base pieces of another split: at most a few overlap a range
        base = (np.concatenate([b[0] for b in base]), np.concatenate([b[1] for b in base])) \
            if base else (pt.EMPTY_KEYS, pt.EMPTY_COUNTS)
    else:
        base = base[0]
    new_runs = _slices(root, fresh, lo, hi)
    delta = pt.signed_sum(_slices(root, level["delta"], lo, hi) + new_runs +
                          _slices(root, scanned, lo, hi) + _slices(root, removed, lo, hi, -1))
    keys, counts, fresh_counts = pt.combine(base, delta, pt.signed_sum(new_runs), floor)
    wd = WorkDir(plan.work)
    save_array(wd.merged(k, p, "keys"), keys)
    save_array(wd.merged(k, p, "counts"), counts)
    save_array(wd.merged(k, p, "fresh"), fresh_counts)
    out = pt.signed_sum([base, delta]) if compact else delta
    piece = _put_run(root, *out, lo=lo, hi=hi) if len(out[0]) else None
    return {"part": p, "hist": kn.histogram(counts, floor), "piece": piece,
            "delta": len(delta[0])}


@as_task
def table_task(plan: RPlan, k: int, nparts: int, threshold: int) -> dict:
    """Append length k's newly frequent k-grams to T_k; write the rows an old shard
    must be scanned for at length k+1 (new ids that occur in old shards)."""
    wd = WorkDir(plan.work)
    keys, counts, fresh = [], [], []
    for p in range(nparts):
        c = load_array(wd.merged(k, p, "counts"), mmap=False)
        keep = c >= threshold
        keys.append(load_array(wd.merged(k, p, "keys"), mmap=False)[keep])
        counts.append(c[keep])
        fresh.append(load_array(wd.merged(k, p, "fresh"), mmap=False)[keep])
    frequent, counts, fresh = np.concatenate(keys), np.concatenate(counts), np.concatenate(fresh)
    table = _table(plan, k)
    old_size = table.size
    known = table.lookup(frequent)
    is_new = known == kn.INVALID
    new_keys, new_ids, new_rows = table.additions(frequent, is_new,
                                                  None if k == 2 else _table(plan, k - 1))
    in_old = (counts - fresh)[is_new] > 0
    save_array(wf.join(plan.work, f"scan-{k}.npy"), new_rows[in_old])
    # the frequent k-grams' ids and counts, for the rank tasks
    known[is_new] = new_ids
    save_array(wd.decoded(k, 0, "freq_ids"), known)
    save_array(wd.decoded(k, 0, "freq_counts"), counts)
    record = plan.tables.get(k) or {"size": 0, "chunks": []}
    if len(new_keys):
        chunks = record["chunks"] + [_put_chunk(plan.root, new_keys, new_ids, new_rows)]
        if len(chunks) > MAX_CHUNKS:
            merged = pt.IdTable(k, table.chunks + [(new_keys, new_ids, new_rows)],
                                plan.code).merged()
            chunks = [_put_chunk(plan.root, *merged)]
        record = {"size": old_size + len(new_keys), "chunks": chunks}
    table = record if record["chunks"] else None
    return {"table": table, "old_size": old_size, "added": len(new_keys),
            "scan_rows": int(in_old.sum())}


@as_task
def rank_task(plan: RPlan, r: int, lengths: list[int], groups: Groups, task_firsts: np.ndarray,
              selected: int, out_dir) -> int:
    """Rank task r's rows (whole groups), from the table tasks' frequent ids and counts
    and the id tables' tokens, written as one Parquet file."""
    wd = WorkDir(plan.work)
    g0, g1, lo, hi = groups.task_span(task_firsts, r, selected)
    rows = {}
    for k in lengths:
        counts = load_array(wd.decoded(k, 0, "freq_counts"))
        mask = groups.rows_in(counts, k, g0, g1)
        ids = load_array(wd.decoded(k, 0, "freq_ids"))[mask]
        rows[k] = (_table(plan, k).tokens()[ids], np.asarray(counts[mask]))
    return write_ranked(rows, groups, lo, hi, wf.join(out_dir, f"part-{r:05d}.parquet"))


# ---------------------------------------------------------------- driver

def _empty_level() -> dict:
    return {"table": None, "base": [], "delta": []}


def run_refresh(cfg: BuildConfig, keep: int = 3, spark=None) -> dict:
    """Refresh the versioned table at ``cfg.output``; returns a summary (and the new
    version's manifest under "manifest" when one was built)."""
    t_start = time.time()
    cfg.validate()
    vs.check_keep(keep)         # before building, not after
    where = locate(cfg.output, cfg.storage)
    check_bucket(where)
    root = vs.check_root(where)
    with OutputLock(where):
        return _run_locked(cfg, keep, root, spark, t_start)


def _staging(cfg: BuildConfig, root, vid: str):
    """A new version's staging folder: beside it on a local disk; for a root on an object
    store, this machine's cache when the tasks run here, else the store itself (a hidden
    folder in versions/, which every executor reaches and `clear_leftovers` removes)."""
    if isinstance(root, str):
        return staging_path(vs.version_path(root, vid))
    if runs_here(cfg):      # one per root: the next run clears what a killed one left
        return staging_path(root.child(vs.VERSIONS, ".next"))
    return root.child(vs.VERSIONS, f".{vid}.fgram-staging")


def _run_locked(cfg: BuildConfig, keep: int, root, spark, t_start: float) -> dict:
    vs.clear_leftovers(root)        # of a refresh killed before it could clean up
    previous = vs.current(root)
    shards = plan_shards(cfg.inputs, cfg.read_options())
    digest = fingerprint_digest(run_fingerprint(cfg, shards))
    code = store_code(shards)
    old_store = None
    if previous is not None:
        vpath = vs.version_path(root, previous)
        old = load_json(wf.join(vpath, "manifest.json"))
        if old.get("run_fingerprint") == digest:
            return {"version": previous, "previous": previous, "built": False,
                    "pruned": vs.prune(root, keep), "collected": collect_garbage(root)}
        if wf.exists(wf.join(vpath, "store.json")):
            old_store = load_json(wf.join(vpath, "store.json"))
            if old_store.get("options") != store_options(cfg, code):
                old_store = None        # other options: start the store afresh
    vid = vs.new_version_id()
    out = vs.version_path(root, vid)
    staging = _staging(cfg, root, vid)
    wf.remove_tree(staging)
    work = wf.join(staging, "_work")
    wf.make_dirs(work)
    wf.make_dirs(objects_dir(root))
    # Spark's JVM starts (seconds) while the driver plans and counts new units
    starting = _Starting(cfg, spark)
    try:
        bound = old.get("cutoff_count") if old_store and old.get("fgrams") == cfg.size else None
        manifest, store = _refresh(cfg, root, staging, shards, old_store, starting, code, bound)
        manifest["run_fingerprint"] = digest
        manifest["refresh"]["previous"] = previous
        save_json(wf.join(staging, "store.json"), store)
        wf.remove_tree(work)
        manifest["seconds"] = round(time.time() - t_start, 3)
        finish(staging, out, manifest, new_folder=True)
        starting.wait()     # a warm-up job still running would be cut off at exit, noisily
    except BaseException:
        starting.wait()
        wf.remove_tree(staging)
        raise
    vs.switch_current(root, vid)
    pruned = vs.prune(root, keep)
    return {"version": vid, "previous": previous, "built": True, "pruned": pruned,
            "collected": collect_garbage(root), "manifest": manifest}


def _refresh(cfg: BuildConfig, root, staging, shards: list[Shard], old_store: dict | None,
             starting: _Starting, code: kn.KeyCode,
             old_cutoff: int | None = None) -> tuple[dict, dict]:
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
    rare = [{(a, b): name for a, b, name in old_store["shards"][digests[i]].get("rare", [])}
            for i in kept_idx]
    plan = RPlan(cfg, root, work, code, new_shards, plan_units(new_shards, cfg.unit_tokens),
                 kept_shards, kept_units,
                 {k: lv["table"] for k, lv in old_levels.items() if lv["table"]},
                 [rare[u.shard].get((u.start, u.stop)) for u in kept_units])
    kn.warm_up()
    ex = HeadStart(starting, cfg.master, release=_release_driver)
    timing = {"plan": round(time.time() - t_begin, 3)}
    entries = {d: {"record": e["record"], "totals": e["totals"],
                   "partials": {k: list(v) for k, v in e["partials"].items()},
                   **({"rare": e["rare"]} if "rare" in e else {})}
               for d, e in old_store["shards"].items() if d in current}
    new_entries = {digests[i]: {"record": shard_record(shards[i]),
                                "totals": {"documents": 0, "tokens": 0}, "partials": {}}
                   for i in new_idx}
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
        # batches (a scan takes ~0.1 s; a Spark task's launch ~50 ms more)
        todo = [("count", u) for u in range(len(plan.new_units))]
        n_scanned = len(plan.kept_units) if k > 2 and scan_rows else 0
        todo += [("scan", u) for u in range(n_scanned)]
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: count new, scan old units")
        done_now = ex.map_batched(len(todo), lambda i, k=k, o=old_size, todo=todo: (
            count_task(plan, k, todo[i][1]) if todo[i][0] == "count"
            else scan_task(plan, k, todo[i][1], o)))
        stats = [r for (kind, _), r in zip(todo, done_now) if kind == "count"]
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
        for (kind, u), r in zip(todo, done_now):
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
        nparts = ex.parallelism * max(rounds, 1)       # no lone last round
        merged = ex.map_batched(nparts, lambda p, k=k, n=nparts, f=floor, lv=level, c=compact:
                                merge_task(plan, k, p, n, f, lv, fresh, scanned, gone, c))
        pieces = sorted((m["piece"] for m in merged if m["piece"]), key=lambda x: x["lo"])
        new_level = {"base": pieces, "delta": []} if compact else \
            {"base": level["base"], "delta": pieces}
        t_merge = time.time()
        if not done:
            threshold = add_length(hists, k, [m["hist"] for m in merged], cfg.size, threshold)
        kept = sum(hists.get(k, {}).values()) if not done else 0
        tab = ex.map(1, lambda _, k=k, n=nparts, t=threshold if not done else 2**62:
                     table_task(plan, k, n, t))[0]
        new_level["table"] = tab["table"]
        if tab["table"]:
            plan.tables[k] = tab["table"]
        if tab["table"] and tab["table"]["size"] * (24 + 4 * k) > max(cfg.broadcast_budget, 1):
            raise ConfigError(f"refresh: the id table of {k}-grams ({tab['table']['size']} rows) "
                              f"exceeds --broadcast-budget; raise it, or use `fgram build`")
        old_size, scan_rows = tab["old_size"], tab["scan_rows"]
        levels[k] = new_level
        passes.append({"length": k, "count_threshold": floor, "threshold": threshold,
                       "candidates": sum(s["counted"] for s in stats), "kept": kept,
                       "partitions": nparts, "new_units": len(plan.new_units),
                       "scanned_units": n_scanned,
                       "scanned_at_rare": sum(r.get("at_rare", False) for r in done_now),
                       "scanned_at_anchors": sum(r.get("at_anchors", False) for r in done_now),
                       "scanned_grams": sum(r["n"] for r in scanned),
                       "ids_added": tab["added"], "ids": (tab["table"] or {}).get("size", 0),
                       "delta": sum(m["delta"] for m in merged), "compacted": compact,
                       "seconds": round(time.time() - t0, 3),
                       "task_seconds": {kind: round(sum(r["seconds"] for (w, _), r in
                                                        zip(todo, done_now) if w == kind), 3)
                                        for kind in ("count", "scan")},
                       "stages": {"count": round(t_count - t0, 3),
                                  "merge": round(t_merge - t_count, 3),
                                  "table": round(time.time() - t_merge, 3)}})
        done = done or kept == 0
    entries.update(new_entries)
    totals = {"documents": sum(e["totals"]["documents"] for e in entries.values()),
              "tokens": sum(e["totals"]["tokens"] for e in entries.values())}
    if totals["tokens"] == 0:
        raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")
    t0 = time.time()
    PROGRESS.stage("select")
    cutoff, cut_len, selected, by_len = _selection(hists, cfg.size)
    groups = Groups(hists, cutoff, cut_len)
    task_firsts = rank_split(groups, ex.parallelism, selected)
    lengths = sorted(hists)
    out_dir = wf.join(staging, "fgrams")
    wf.make_dirs(out_dir)
    ex.map(len(task_firsts), lambda r: rank_task(plan, r, lengths, groups, task_firsts, selected,
                                                 out_dir))
    store = {"options": store_options(cfg, code), "fgram_version": __version__,
             "levels": {str(k): v for k, v in levels.items()},
             "shards": entries}
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
        "refresh": {"new_shards": len(new_shards), "kept_shards": len(kept_shards),
                    "head_start_tasks": ex.in_driver,
                    "executor_start_seconds": starting.seconds,
                    "removed_shards": len(removed), "store_reused": bool(old_levels)},
        "table": table_record(),
    }
    return manifest, store


def main(argv=None) -> None:
    """Entry point for `spark-submit fgram/jobs/refresh.py OUT INPUT...` (the CLI's options)."""
    from fgram.cli import cli
    cli.main(args=["refresh", *(sys.argv[1:] if argv is None else argv)], prog_name="refresh.py")


if __name__ == "__main__":
    main()
