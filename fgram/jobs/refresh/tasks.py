"""The tasks of a refresh, length by length: count new units, scan old units for what
their partials lack, merge the partials per key range, extend the id tables, and
rank and write the new version's table."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from fgram.jobs.executors import as_task
from fgram.jobs.refresh.store import Level, get, put, put_chunk, put_run
from fgram.jobs.runs import SCRATCH
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.formats.reading import Shard, Unit
from fgram.pipeline.formats.registry import format_of, read_unit
from fgram.pipeline.formats.table import write_ranked
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import WorkDir, load_array, read_into, save_array
from fgram.pipeline.kernels import partials as pt
from fgram.pipeline.kernels import scans
from fgram.pipeline.kernels.counting import ids_at, unit_table
from fgram.pipeline.kernels.keys import INVALID, KeyCode
from fgram.pipeline.kernels.merging import part_range
from fgram.pipeline.kernels.packing import pack_order, unpack_order
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.selection import histogram
from fgram.pipeline.records import JsonRecord, int_keys


@dataclass
class RPlan:
    """What every task needs (shipped with the task closure: small)."""

    cfg: BuildConfig
    root: Location  # the refresh root
    work: Location
    code: KeyCode  # the store's keys (`store_code`)
    new_shards: list[Shard]
    new_units: list[Unit]
    kept_shards: list[Shard]
    kept_units: list[Unit]
    tables: dict  # length -> {"size", "chunks": [{"keys", "ids", "tokens", "n"}]} (current)
    kept_rare: list  # per kept unit: {w: the object of its positions of w-grams without id}


@dataclass
class UnitCount(JsonRecord):
    """What counting a new unit gives: its partial counts (a run in the store), and for
    k >= 3 where its (k-1)-grams have no id (``rare``, an object of the store; None
    where that is most of the unit: a later scan reads it whole)."""

    FORMAT = 1

    unit: int
    run: dict  # the run's objects: {"keys", "counts", "n"}
    documents: int
    tokens: int
    counted: int
    rare: str | None
    seconds: float


@dataclass
class UnitScan(JsonRecord):
    """What scanning a kept unit gives: the counts of the k-grams its partials lacked."""

    FORMAT = 1

    unit: int
    run: dict | None  # None: none found
    at_rare: bool  # only at the (k-1)-grams that had no id when the unit was counted
    at_anchors: bool  # only at windows holding an anchor token
    seconds: float


@dataclass
class RangeTotals(JsonRecord):
    """A key range's totals after a merge: their histogram, the range's new base or delta
    piece (a run in the store, None when empty) and the delta's size."""

    FORMAT = 1

    part: int
    hist: dict[int, int]
    piece: dict | None
    delta: int

    @classmethod
    def restore(cls, values: dict) -> dict:
        return {**values, "hist": int_keys(values["hist"])}


@dataclass
class TableUpdate(JsonRecord):
    """T_k after its newly frequent k-grams were added."""

    FORMAT = 1

    table: dict | None  # {"size", "chunks"}; None while T_k is empty
    old_size: int  # ids before: an id at or above it is new
    added: int
    scan_rows: int  # new ids that old shards must be scanned for at k+1


_TABLES: dict[tuple, pt.IdTable] = {}
MAX_CHUNKS = 8  # an id table's chunks (one per refresh that added ids) before one is merged


def id_table(plan: RPlan, k: int) -> pt.IdTable:
    """T_k as the plan names it, read once per worker process."""
    t = plan.tables.get(k) or {"chunks": []}
    key = (plan.root, k, tuple(c["keys"] for c in t["chunks"]))
    if key not in _TABLES:
        if len(_TABLES) > 8:
            _TABLES.clear()
        _TABLES[key] = pt.IdTable(
            k,
            [
                (
                    get(plan.root, c["keys"], mmap=False),
                    get(plan.root, c["ids"], mmap=False),
                    get(plan.root, c["tokens"], mmap=False),
                )
                for c in t["chunks"]
            ],
            plan.code,
        )
    return _TABLES[key]


def release_driver() -> None:
    """The driver runs no more tasks: give back its work arrays and cached id tables."""
    SCRATCH.clear()
    _TABLES.clear()


def unit_file(plan: RPlan, k: int, u: int, what: str) -> Location:
    return WorkDir(plan.work).unit(k, u, what)


def _read(plan: RPlan, shards: list[Shard], unit: Unit):
    """A unit's token stream, with the overlap its longest n-grams need."""
    cfg = plan.cfg
    return read_unit(
        shards[unit.shard], unit, cfg.read_options(), overlap=cfg.max_len - 1, scratch=SCRATCH
    )


@as_task
def count_task(plan: RPlan, k: int, u: int) -> UnitCount:
    """Count new unit u's candidate k-grams (prefix and suffix in T_{k-1})."""
    t0 = time.time()
    cfg = plan.cfg
    unit = plan.new_units[u]
    stream = _read(plan, plan.new_shards, unit)
    tokens = stream.tokens
    if k == 2:
        prev = tokens
    else:
        uniq = load_array(unit_file(plan, k - 1, u, "uniq"), mmap=False)
        packed = read_into(unit_file(plan, k - 1, u, "order"), SCRATCH, "packed_order")
        prev_order = unpack_order(packed, SCRATCH)
        prev = ids_at(id_table(plan, k - 1).lookup(uniq), prev_order, len(tokens), SCRATCH)
    at = rare_windows(tokens, prev, k - 1) if k >= 3 else None
    rare = put(plan.root, at) if at is not None else None
    last = k == cfg.max_len
    uniq, counts, order, counted = unit_table(
        prev, tokens, k, stream.limit, want_order=not last, code=plan.code, scratch=SCRATCH
    )
    if not last:
        assert order is not None  # asked for
        save_array(unit_file(plan, k, u, "uniq"), uniq)
        save_array(unit_file(plan, k, u, "order"), pack_order(order, SCRATCH))
    nz = counts > 0
    run = put_run(plan.root, uniq[nz], counts[nz])
    return UnitCount(
        unit=u,
        run=run,
        documents=stream.documents,
        tokens=stream.n_tokens,
        counted=counted,
        rare=rare,
        seconds=time.time() - t0,
    )


RARE_SHARE = 0.5  # past this share of a unit's windows, a scan rolls over all of them


def rare_windows(tokens: np.ndarray, ids: np.ndarray, w: int) -> np.ndarray | None:
    """Where a unit's w-grams have no id (``ids``: w-gram ids by position), among the
    windows without a separator: the only places where a w-gram that gets an id later
    can occur (id tables only grow), so a later refresh scans just these for new
    w-gram ids, not the whole unit. None when they are over `RARE_SHARE` of the
    windows (testing each would cost more than rolling over all)."""
    n = len(tokens) - w + 1
    if n <= 0:
        return np.zeros(0, np.uint32)
    out = np.empty(n, np.uint32 if len(tokens) <= 2**32 else np.int64)  # 4 bytes unless huge
    m = scans.windows_without_id(tokens, ids, w, out, int(RARE_SHARE * n))
    return None if m < 0 else out[:m].copy()


def _raw_values(plan: RPlan, unit: Unit) -> np.ndarray | None:
    """A kept unit's raw values (and the overlap its longest n-grams need) as a memory
    map, when its format keeps them so on this machine (no copy, no conversion; a scan
    at given starts reads only their pages). None otherwise (read as a stream)."""
    shard = plan.kept_shards[unit.shard]
    return format_of(shard).raw_values(shard, unit, plan.cfg.max_len - 1, plan.cfg.storage)


@as_task
def scan_task(plan: RPlan, k: int, u: int, old_size: int) -> UnitScan:
    """Count, in kept unit u, the k-grams it lacks: prefix or suffix new in T_{k-1}."""
    t0 = time.time()
    unit = plan.kept_units[u]
    rows = load_array(plan.work.child(f"scan-{k - 1}.npy"), mmap=False)
    tables = [id_table(plan, j) for j in range(2, k)]
    rare = plan.kept_rare[u].get(k - 1)
    raw = _raw_values(plan, unit)
    if raw is not None:  # a flat file here: its values, not a stream (at rare windows,
        # only their pages are read; else every window, without a copy)
        tokens, limit = raw, unit.stop - unit.start
        sep = -1 if plan.cfg.doc_sep is None else plan.cfg.doc_sep
    else:
        stream = _read(plan, plan.kept_shards, unit)
        tokens, limit, sep = stream.tokens, stream.limit, None
    starts = get(plan.root, rare) if rare is not None else scans.anchored_starts(tokens, rows)
    keys, counts = scans.scan_unit(
        tokens, limit, k, scans.window_set(rows), tables, old_size, starts, sep
    )
    run = put_run(plan.root, keys, counts) if len(keys) else None
    return UnitScan(
        unit=u,
        run=run,
        at_rare=rare is not None,
        at_anchors=rare is None and starts is not None,
        seconds=time.time() - t0,
    )


def _slices(root, runs: list[dict], lo: int, hi: int | None, sign: int = 1):
    out = []
    for run in runs:
        keys, counts = pt.slice_run(get(root, run["keys"]), get(root, run["counts"]), lo, hi)
        if len(keys):
            out.append((keys, counts if sign > 0 else -counts.astype(np.int64)))
    return out


@as_task
def merge_task(
    plan: RPlan,
    k: int,
    p: int,
    nparts: int,
    floor: int,
    level: Level,
    fresh: list[dict],
    scanned: list[dict],
    removed: list[dict],
    compact: bool,
) -> RangeTotals:
    """Totals of key range p of length k: base + (old delta + new - removed + scanned).

    Writes the range's keys with total >= floor (and their new-shard counts)
    to the work folder; returns the range's histogram and its new base piece
    (``compact``) or delta piece."""
    root = plan.root
    lo, hi = part_range(nparts, p)
    base = _slices(root, level.base, lo, hi)
    if len(base) != 1:  # base pieces of another split: at most a few overlap a range
        base = (
            (np.concatenate([b[0] for b in base]), np.concatenate([b[1] for b in base]))
            if base
            else (pt.EMPTY_KEYS, pt.EMPTY_COUNTS)
        )
    else:
        base = base[0]
    new_runs = _slices(root, fresh, lo, hi)
    delta = pt.signed_sum(
        _slices(root, level.delta, lo, hi)
        + new_runs
        + _slices(root, scanned, lo, hi)
        + _slices(root, removed, lo, hi, -1)
    )
    keys, counts, fresh_counts = pt.combine(base, delta, pt.signed_sum(new_runs), floor)
    wd = WorkDir(plan.work)
    save_array(wd.merged(k, p, "keys"), keys)
    save_array(wd.merged(k, p, "counts"), counts)
    save_array(wd.merged(k, p, "fresh"), fresh_counts)
    out = pt.signed_sum([base, delta]) if compact else delta
    piece = put_run(root, *out, lo=lo, hi=hi) if len(out[0]) else None
    return RangeTotals(part=p, hist=histogram(counts, floor), piece=piece, delta=len(delta[0]))


@as_task
def table_task(plan: RPlan, k: int, nparts: int, threshold: int) -> TableUpdate:
    """Append length k's newly frequent k-grams to T_k; write the rows an old shard
    must be scanned for at length k+1 (new ids that occur in old shards). The longest
    length has no id table: nothing is counted after it, and its rows are its keys'
    prefixes in T_{k-1} and their last tokens."""
    wd = WorkDir(plan.work)
    keys: list[np.ndarray] = []
    count_parts: list[np.ndarray] = []
    fresh_parts: list[np.ndarray] = []
    for p in range(nparts):
        c = load_array(wd.merged(k, p, "counts"), mmap=False)
        keep = c >= threshold
        keys.append(load_array(wd.merged(k, p, "keys"), mmap=False)[keep])
        count_parts.append(c[keep])
        fresh_parts.append(load_array(wd.merged(k, p, "fresh"), mmap=False)[keep])
    frequent = np.concatenate(keys)
    counts, fresh = np.concatenate(count_parts), np.concatenate(fresh_parts)
    if k == plan.cfg.max_len:  # no k+1: the rank tasks make rows from the keys alone
        save_array(wd.decoded(k, 0, "freq_keys"), frequent)
        save_array(wd.decoded(k, 0, "freq_counts"), counts)
        return TableUpdate(table=None, old_size=0, added=0, scan_rows=0)
    table = id_table(plan, k)
    old_size = table.size
    known = table.lookup(frequent)
    is_new = known == INVALID
    new_keys, new_ids, new_rows = table.additions(
        frequent, is_new, None if k == 2 else id_table(plan, k - 1)
    )
    in_old = (counts - fresh)[is_new] > 0
    save_array(plan.work.child(f"scan-{k}.npy"), new_rows[in_old])
    # the frequent k-grams' ids and counts, for the rank tasks
    known[is_new] = new_ids
    save_array(wd.decoded(k, 0, "freq_ids"), known)
    save_array(wd.decoded(k, 0, "freq_counts"), counts)
    record = plan.tables.get(k) or {"size": 0, "chunks": []}
    if len(new_keys):
        chunks = record["chunks"] + [put_chunk(plan.root, new_keys, new_ids, new_rows)]
        if len(chunks) > MAX_CHUNKS:
            merged = pt.IdTable(
                k, table.chunks + [(new_keys, new_ids, new_rows)], plan.code
            ).merged()
            chunks = [put_chunk(plan.root, *merged)]
        record = {"size": old_size + len(new_keys), "chunks": chunks}
    published = record if record["chunks"] else None
    return TableUpdate(
        table=published, old_size=old_size, added=len(new_keys), scan_rows=int(in_old.sum())
    )


@as_task
def rank_task(
    plan: RPlan,
    r: int,
    lengths: list[int],
    groups: Groups,
    task_firsts: np.ndarray,
    selected: int,
    out_dir,
) -> int:
    """Rank task r's rows (whole groups), from the table tasks' frequent ids and counts
    and the id tables' tokens, written as one Parquet file. The count's work arrays go
    first (every count task of the run is done)."""
    SCRATCH.clear()
    wd = WorkDir(plan.work)
    g0, g1, lo, hi = groups.task_span(task_firsts, r, selected)
    rows = {}
    for k in lengths:
        counts = load_array(wd.decoded(k, 0, "freq_counts"))
        mask = groups.rows_in(counts, k, g0, g1)
        if k == plan.cfg.max_len:  # no id table: T_{k-1}'s rows of the prefixes, last tokens
            keys = load_array(wd.decoded(k, 0, "freq_keys"))[mask]
            tokens = pt.key_rows(plan.code, keys, id_table(plan, k - 1) if k > 2 else None)
        else:
            tokens = id_table(plan, k).tokens()[load_array(wd.decoded(k, 0, "freq_ids"))[mask]]
        rows[k] = (tokens, np.asarray(counts[mask]))
    return write_ranked(rows, groups, lo, hi, out_dir.child(f"part-{r:05d}.parquet"))
