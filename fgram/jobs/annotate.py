"""fgram annotate: tag every token of training shards with its longest f-gram match.

One task per unit of input (the units of `fgram build`). Each task opens the
f-gram index (memory-mapped, shared by the tasks of a machine), matches its
tokens, and writes tags aligned with the input:

- Parquet input: one Parquet file per unit, ``<stem>.<unit>.parquet``, rows in
  the input's order, with the input's other columns (keys such as doc_id),
  ``fgram_ids`` list<int32> (int64 when the table has 2**31 or more f-grams)
  and ``match_len`` list<uint8>.
- Flat input: ``<name>.fgid.npy`` and ``<name>.mlen.npy``, indexed exactly like
  the tokens: a separator position holds fgram id -1 and length 0. Each task
  fills its token range of the two arrays, reading K-1 tokens before it so a
  match that starts in the previous range is still found.

The manifest names the f-gram table (its manifest's fingerprint) and carries
the coverage: positions by match length, and with ``sizes`` the coverage of the
table's first S' rows for each S' of them (`pipeline.coverage`: one walk down each
match's suffix links answers them all).

OUT may be on an object store. When the tasks run on this machine (local mode,
``--engine local``) they write into a staging folder here, uploaded when done.
On a cluster they write into a staging prefix on the store beside OUT: a
Parquet file per unit as one object, a flat shard's tags as one object per
unit, which a task per shard then streams into that shard's two ``.npy``
objects. Either way the output is published with the build's protocol
(`publish.finish`): files under names of their own generation, the manifest
(which lists them) last but `_SUCCESS`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fgram.jobs.executors import as_task, make_executor, runs_here
from fgram.jobs.progress import PROGRESS
from fgram.jobs.stages import Stage
from fgram.pipeline import workdir as wf
from fgram.pipeline.config import ReadsShards
from fgram.pipeline.coverage import check_sizes, count_by_size, coverage_by_size, coverage_table
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.failures import public_options
from fgram.pipeline.index import FgramIndex, manifest_fingerprint
from fgram.pipeline.inputs import plan_shards, plan_units, shard_record, tokens_of
from fgram.pipeline.locks import OutputLock
from fgram.pipeline.publish import check_output, finish, staging_for
from fgram.pipeline.reading import (
    Shard,
    Unit,
    check_range,
    list_column,
    read_flat_range,
    read_row_groups,
    reading,
)
from fgram.pipeline.storage import Location
from fgram.pipeline.table import arrow_list, write_table
from fgram.pipeline.versions import resolve_table
from fgram.version import __version__


@dataclass
class AnnotateConfig(ReadsShards):
    table: str
    inputs: list[str]
    output: str | None = None  # None: coverage only, nothing written
    column: str = "tokens"
    dtype: str = "uint16"
    doc_sep: int | None = None
    unit_tokens: int = 16 * 2**20
    overwrite: bool = False
    engine: str = "spark"
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    storage: dict[str, str] = field(default_factory=dict)  # --storage-option (secrets inside)
    strict: bool = False  # a flat file whose sample looks wrong fails (`guards`)
    tokenizer: str | None = None  # coverage: the inputs are text, tokenized with this first
    sizes: list[int] | None = None  # coverage of the first S' rows too, for each S' (`coverage`)
    text_field: str = "text"
    doc_per_line: bool = False


_INDEX: dict[tuple, FgramIndex] = {}


def index_id(index: FgramIndex) -> str:
    """What names one index's content (its table's fingerprint, its arrays' sizes and,
    on an object store, their checksums): a rewritten index gets another id."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(index.meta, sort_keys=True).encode()).hexdigest()[:16]


def _index(table: str, ident: str, storage: dict | None = None) -> FgramIndex:
    """The index ``ident`` of ``table``, opened once per worker process (a worker that
    served an earlier run of another index at the same path opens this one afresh)."""
    if (table, ident) not in _INDEX:
        _INDEX.clear()
        index = FgramIndex.open(table, storage=storage)
        if index_id(index) != ident:
            raise FgramError(f"{table}: its index changed while annotate ran")
        _INDEX[table, ident] = index
    return _INDEX[table, ident]


def sidecar(folder, shard: Shard, what: str):
    return wf.join(folder, f"{os.path.basename(shard.uri)}.{what}.npy")


def _part(staging, shard: Shard, start: int, what: str):
    """A flat shard's tags of the unit at ``start``, before `assemble_task` joins them."""
    return wf.join(
        staging, "_work", "parts", f"{os.path.basename(shard.uri)}.{start:012d}.{what}.npy"
    )


def _remote(folder) -> bool:
    return isinstance(folder, Location) and not folder.local


def match_flat(index: FgramIndex, raw: np.ndarray, doc_sep: int | None, uri: str):
    """Tags of a flat token range: separators get id -1 and length 0."""
    if doc_sep is None:
        check_range(raw, uri)
        return index.match(raw)
    sep = np.flatnonzero(raw == doc_sep)
    if len(sep) < len(raw):
        check_range(np.delete(raw, sep), uri)
    starts = np.unique(np.concatenate([sep, sep + 1]))
    fid, mlen = index.match(raw, doc_starts=starts[starts < len(raw)])
    fid[sep] = -1
    mlen[sep] = 0
    return fid, mlen


@as_task
def annotate_task(
    cfg: AnnotateConfig, shards: list[Shard], units: list[Unit], u: int, staging, ident: str
) -> tuple[list[int], list[list[int]] | None]:
    index = _index(cfg.table, ident, cfg.storage)
    unit, shard = units[u], shards[units[u].shard]
    k = index.max_len
    if shard.format == "flat":
        lo = max(unit.start - (k - 1), 0)
        raw = read_flat_range(shard, lo, unit.stop, storage=cfg.storage)
        fid, mlen = match_flat(index, raw, cfg.doc_sep, shard.uri)
        fid, mlen = fid[unit.start - lo :], mlen[unit.start - lo :]
        if _remote(staging):
            wf.save_array(_part(staging, shard, unit.start, "fgid"), fid.astype(_id_type(index)))
            wf.save_array(_part(staging, shard, unit.start, "mlen"), mlen)
        elif staging is not None:
            folder = os.path.join(staging, "tags")
            ids = np.load(sidecar(folder, shard, "fgid"), mmap_mode="r+")
            lens = np.load(sidecar(folder, shard, "mlen"), mmap_mode="r+")
            ids[unit.start : unit.stop] = fid
            lens[unit.start : unit.stop] = mlen
            ids.flush()
            lens.flush()
            del ids, lens
    else:
        with reading(shard.uri):
            table = read_row_groups(shard, unit, None, cfg.storage)
            lengths, values = list_column(table, cfg.column, shard.uri)
        check_range(values, shard.uri)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        fid, mlen = index.match(values, doc_starts=starts[lengths > 0])
        if staging is not None:
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            out = table.drop_columns([cfg.column])
            out = out.append_column("fgram_ids", arrow_list(offsets, fid, _id_type(index)))
            out = out.append_column("match_len", arrow_list(offsets, mlen))
            stem = os.path.splitext(os.path.basename(shard.uri))[0]
            write_table(out, wf.join(staging, "tags", f"{stem}.{unit.start:06d}.parquet"))
    hist = np.bincount(mlen, minlength=k + 1).tolist()
    if cfg.sizes is None:
        return hist, None
    return hist, count_by_size(fid, mlen, index.suffix, cfg.sizes, k).tolist()


def _id_type(index: FgramIndex):
    return np.int32 if index.meta["fgrams"] < 2**31 else np.int64


@as_task
@dataclass(frozen=True)
class AnnotateStage(Stage, name="annotate", call=annotate_task, index="u"):
    """Tag (or, without an output, only count the matches of) a unit per task."""

    cfg: AnnotateConfig
    shards: list[Shard]
    units: list[Unit]
    staging: Any  # where the tags go (a local path or a `Location`)
    ident: str  # the index's identity (`index_id`): a worker's cached index is this one


@dataclass(frozen=True)
class AssembleStage(Stage, name="assemble"):
    """Join a flat shard's per-unit tag objects into its two files, a shard per task."""

    shards: list[Shard]  # the flat shards
    starts: list[list[int]]  # each one's units' first tokens
    id_type: str
    staging: Location

    def run(self, task: int) -> None:
        assemble_task(self.shards[task], self.starts[task], self.id_type, self.staging)


def assemble_task(shard: Shard, starts: list[int], id_type: str, staging: Location) -> None:
    """Stream a flat shard's per-unit tag objects, in order, into its two ``.npy``
    objects (one upload each)."""
    for what, dtype in (("fgid", id_type), ("mlen", np.uint8)):
        wf.concat_arrays(
            sidecar(staging.child("tags"), shard, what),
            [_part(staging, shard, start, what) for start in starts],
            dtype,
            (shard.n_items,),
        )


def run_annotate(cfg: AnnotateConfig, spark=None) -> dict:
    """Tag the shards (or only measure coverage when cfg.output is None); returns the manifest."""
    t0 = time.time()
    if cfg.engine not in ("spark", "local"):
        raise ConfigError(f"--engine must be spark or local, got {cfg.engine!r}")
    if cfg.tokenizer:
        return _coverage_of_text(cfg, spark)
    cfg = cfg.tokenized()[0]  # `fgram tokenize` outputs say how to read them
    table = resolve_table(cfg.table, cfg.storage)
    cfg = _sizes_checked(cfg, table)
    index = FgramIndex.open(table, storage=cfg.storage)
    out = check_output(cfg.output, cfg.overwrite, cfg.storage) if cfg.output else None
    shards = plan_shards(cfg.inputs, cfg.read_options())
    units = plan_units(shards, cfg.unit_tokens)
    names = [os.path.basename(s.uri) for s in shards]
    if len(set(names)) != len(names):
        raise ConfigError("two inputs share a file name; tags are named after their input files")
    ex = make_executor(cfg.engine, spark, cfg.master, cfg.conf)
    if out is None:
        return _annotate(cfg, ex, table, index, shards, units, None, None, t0)
    with OutputLock(out):
        staging = staging_for(out, runs_here(cfg), unique=True)
        try:
            return _annotate(cfg, ex, table, index, shards, units, out, staging, t0)
        except BaseException:
            wf.remove_tree(staging)
            raise


def _sizes_checked(cfg: AnnotateConfig, table: Location) -> AnnotateConfig:
    """``cfg`` with its sizes ascending and distinct, each one the table answers
    (`coverage.check_sizes`)."""
    if cfg.sizes is None:
        return cfg
    manifest = table.child("manifest.json").read_json()
    sizes = sorted(set(cfg.sizes))
    check_sizes(sizes, int(manifest["fgrams"]), manifest["config"].get("size"), table.uri)
    return dataclasses.replace(cfg, sizes=sizes)


def _coverage_of_text(cfg: AnnotateConfig, spark) -> dict:
    """Coverage of text inputs: tokenized (as by `fgram tokenize`, flat shards) into a
    folder of the run beside the table, measured, and the folder removed."""
    from fgram.jobs.tokenize import tokenize_inputs
    from fgram.pipeline.inputs import check_inputs
    from fgram.pipeline.names import TEXT_FILES, is_text_file

    assert cfg.tokenizer is not None
    if cfg.output is not None:
        raise ConfigError("annotate tags token shards: tokenize the text first (fgram tokenize)")
    check_inputs(cfg.inputs, cfg.storage, is_text_file, TEXT_FILES)
    table = resolve_table(cfg.table, cfg.storage)
    _sizes_checked(cfg, table)  # before the text is tokenized
    folder = staging_for(table, runs_here(cfg), unique=True, what="text")
    where = folder if isinstance(folder, str) else folder.uri
    try:
        tokens = tokenize_inputs(cfg, where, spark=spark)
        manifest = run_annotate(
            dataclasses.replace(cfg, inputs=[where], tokenizer=None, doc_sep=None), spark
        )
    finally:
        wf.remove_tree(folder)
    manifest["text"] = {k: tokens[k] for k in ("inputs", "documents", "tokens", "tokenizer")}
    return manifest


def _annotate(
    cfg: AnnotateConfig,
    ex,
    table: Location,
    index: FgramIndex,
    shards,
    units,
    out: Location | None,
    staging,
    t0: float,
) -> dict:
    if staging is not None and not _remote(staging):
        folder = os.path.join(staging, "tags")
        os.makedirs(folder)
        for shard in shards:
            if shard.format == "flat":
                np.lib.format.open_memmap(
                    sidecar(folder, shard, "fgid"),
                    mode="w+",
                    dtype=_id_type(index),
                    shape=(shard.n_items,),
                )
                np.lib.format.open_memmap(
                    sidecar(folder, shard, "mlen"),
                    mode="w+",
                    dtype=np.uint8,
                    shape=(shard.n_items,),
                )
    PROGRESS.stage("annotate" if out else "coverage", len(units), tokens_of(shards, units))
    ident = index_id(index)
    tagging = AnnotateStage(cfg, shards, units, staging, ident)
    results = ex.map(len(units), tagging.run, progress=True)
    if _remote(staging):
        flat = [i for i, s in enumerate(shards) if s.format == "flat"]
        starts = {i: sorted(un.start for un in units if un.shard == i) for i in flat}
        PROGRESS.stage("assemble flat tags", len(flat), unit="shards")
        id_type = np.dtype(_id_type(index)).str
        assembling = AssembleStage(
            [shards[i] for i in flat], [starts[i] for i in flat], id_type, staging
        )
        ex.map(len(flat), assembling.run)
        wf.remove_tree(staging.child("_work"))
    k = index.max_len
    hist = [sum(h[i] for h, _ in results) for i in range(k + 1)]
    coverage = coverage_table(hist)
    if cfg.sizes is not None:
        counts = np.zeros((k + 1, len(cfg.sizes) + 1), np.int64)
        for _, part in results:
            counts += np.asarray(part, np.int64)
        coverage["by_size"] = coverage_by_size(hist, counts, cfg.sizes, index.meta["fgrams"])
    manifest = {
        "fgram_version": __version__,
        "kind": "fgram-tags",
        "table": {
            "path": table.uri,
            "fingerprint": manifest_fingerprint(table),
            "fgrams": index.meta["fgrams"],
            "max_len": k,
        },
        "config": {
            **asdict(cfg),
            "output": out.uri if out else None,
            "storage": public_options(cfg.storage),
        },
        "inputs": [shard_record(s) for s in shards],
        "units": [{"shard": un.shard, "start": un.start, "stop": un.stop} for un in units],
        "coverage": coverage,
        "layout": {
            "parquet": "<stem>.<first row group>.parquet: input columns but "
            "the tokens, fgram_ids list<int>, match_len list<uint8>",
            "flat": "<name>.fgid.npy, <name>.mlen.npy aligned with the tokens; "
            "separators: id -1, length 0",
        },
        "seconds": round(time.time() - t0, 3),
    }
    if staging is not None:
        assert out is not None  # an output is staged
        finish(staging, out, manifest)
    PROGRESS.end()  # the last stage's line
    return manifest
