"""fgram embed: run a model over every f-gram, in fgram_id order, into OUT/embeddings/.

The rows are computed in chunks of ``chunk_rows`` f-grams. Each chunk reads its
id range from the table (row-group statistics prune the rest), pads the
f-grams into ``[B, K]`` batches, runs the model and writes its rows, then a
marker. A run that was killed leaves its staging folder: the next run with the
same table, model, dtype and chunk size skips the chunks that are done (the
rows are a function of the f-gram only, so the bytes are the same). The last
step writes the checksum and metadata and publishes the folder whole.

Where the rows go while the run lasts:

- A table on a local or shared disk: a preallocated ``matrix.npy`` in
  ``OUT/embeddings.staging/``, which every task writes its rows into (so on a
  cluster OUT must be on a filesystem every executor reaches); renamed into
  place at the end.
- A table on an object store, tasks on this machine (``--local``, Spark in local
  mode): the same, in a staging folder of the local cache; the matrix is then
  uploaded under a name of its own generation, ``embeddings.json`` (which names
  it, with its sha256) last.
- A table on an object store, tasks on a cluster: one object per chunk in
  ``OUT/_embeddings-staging/`` on the store (the object is the chunk's marker);
  the driver then streams them, in order, into the matrix object (one multipart
  upload, never the whole matrix in memory).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.jobs import sequence
from fgram.jobs.engines import runs_here
from fgram.jobs.executors import as_task
from fgram.jobs.progress import PROGRESS
from fgram.jobs.sequence import Job, Run, begin
from fgram.jobs.stages import Stage
from fgram.pipeline.config.commands import EmbedConfig
from fgram.pipeline.errors import FgramError
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.cache import file_record
from fgram.pipeline.io.locks import OutputLock
from fgram.pipeline.io.markers import Markers
from fgram.pipeline.io.publish import commit_generation, generation_name, here, staging_path
from fgram.pipeline.io.storage import Location, json_bytes
from fgram.pipeline.io.workdir import load_json, save_json
from fgram.pipeline.tables.embed import load_model, model_factory, storage_dtype, to_stored
from fgram.pipeline.tables.index import publish_parts
from fgram.pipeline.tables.versions import (
    manifest_fingerprint,
    open_table,
    table_dataset,
    table_part,
)


def padded(tokens_column, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """A list<int32> Arrow column -> (int32 [B, max_len] right-padded with 0, lengths)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(tokens_column).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(tokens_column).to_numpy(zero_copy_only=False).astype(np.int32)
    out = np.zeros((len(lengths), max_len), dtype=np.int32)
    row = np.repeat(np.arange(len(lengths)), lengths)
    col = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, col] = flat
    return out, lengths


def _shared(reuse: Any, toks: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For each f-gram of a chunk, its id in the store ``reuse`` (-1 where it has none):
    the whole f-gram matched, its tokens a document of their own."""
    starts = np.cumsum(lengths) - lengths
    flat = toks[np.arange(toks.shape[1])[None, :] < lengths[:, None]]
    fid, mlen = reuse.index.match(flat, doc_starts=starts)
    last = starts + lengths - 1
    return np.where(mlen[last] == lengths, fid[last], -1) if len(last) else last


def _chunk_rows(
    model, dataset, lo: int, hi: int, max_len: int, batch: int, reuse: Any = None
) -> tuple[np.ndarray, int]:
    """(the chunk's rows as float32, how many were copied from ``reuse``: an `FgramStore` of
    the same model and row type, for the f-grams it holds too)."""
    import pyarrow.compute as pc

    t = dataset.to_table(
        columns=["fgram_id", "tokens"],
        filter=(pc.field("fgram_id") >= lo) & (pc.field("fgram_id") < hi),
    )
    t = t.sort_by("fgram_id")
    ids = t.column("fgram_id").to_numpy()
    if len(ids) != hi - lo or (len(ids) and (ids[0] != lo or ids[-1] != hi - 1)):
        raise FgramError(
            f"{dataset.files[0]}...: f-gram ids {lo}..{hi - 1} are not all in the table"
        )
    toks, lengths = padded(t.column("tokens").combine_chunks(), max_len)
    old = _shared(reuse, toks, lengths) if reuse is not None else np.full(len(ids), -1)
    todo = np.flatnonzero(old < 0)
    outs, t_model = [], time.perf_counter()
    for s in range(0, len(todo), batch):
        part = todo[s : s + batch]
        outs.append(np.asarray(model(toks[part], lengths[part]), dtype=np.float32))
    _MODEL_SECONDS[0] += time.perf_counter() - t_model
    made = np.concatenate(outs) if outs else np.zeros((0, 0), np.float32)
    if made.ndim != 2 or len(made) != len(todo):
        raise FgramError(
            f"model returned shape {made.shape} for {len(todo)} f-grams; expected [{len(todo)}, d]"
        )
    if len(todo) == len(ids):
        return made, 0
    rows = np.empty((len(ids), reuse.dim), np.float32)
    rows[todo] = made
    kept = np.flatnonzero(old >= 0)
    rows[kept] = reuse.rows(old[kept]).astype(np.float32)
    return rows, len(kept)


_MODELS: dict = {}
_MODEL_SECONDS = [0.0]  # time inside model calls in this process (for the overhead figure)


def _model(spec: str, device: str | None):
    """The model of ``spec`` on ``device``, built once per process."""
    if (spec, device) not in _MODELS:
        _MODELS.clear()
        _MODELS[spec, device] = load_model(spec, device)
    return _MODELS[spec, device]


def _dataset(table: Location):
    return table_dataset(*open_table(table))


_REUSED: dict = {}


def _reused(cfg: EmbedConfig) -> Any:
    """The store whose rows ``cfg.reuse`` names (mapped, opened once per process), or None
    where it is not of the same model and row type."""
    if not cfg.reuse:
        return None
    if cfg.reuse not in _REUSED:
        from fgram.pipeline.tables.embed import FgramStore

        _REUSED.clear()
        store = FgramStore.open(cfg.reuse, mode="mmap", storage=cfg.storage)
        same = store.meta.get("model") == cfg.model and store.meta.get("dtype") == cfg.float
        _REUSED[cfg.reuse] = store if same else None
    return _REUSED[cfg.reuse]


def embed_chunk(
    cfg: EmbedConfig, table: Location, c: int, total: int, max_len: int, staging: Location
) -> tuple[float, int]:
    """Compute chunk c's rows, write them into the staging matrix, then its marker (on
    an object store: as the chunk's own object, which is its marker).

    Returns the seconds spent inside the model and the rows copied from ``cfg.reuse``."""
    before = _MODEL_SECONDS[0]
    lo, hi = c * cfg.chunk_rows, min((c + 1) * cfg.chunk_rows, total)
    model = _model(cfg.model, cfg.device)
    made, reused = _chunk_rows(model, _dataset(table), lo, hi, max_len, cfg.batch, _reused(cfg))
    rows = to_stored(made, cfg.float)
    if not staging.local:
        wf.save_array(_chunk(staging, c), rows)
        return _MODEL_SECONDS[0] - before, reused
    matrix = np.load(os.path.join(staging.path, "matrix.npy"), mmap_mode="r+")
    if matrix.shape[1] != rows.shape[1]:
        raise FgramError(
            f"{cfg.model}: rows of width {rows.shape[1]} in chunk {c}, "
            f"{matrix.shape[1]} in the first"
        )
    matrix[lo:hi] = rows
    matrix.flush()
    del matrix
    _markers(staging).mark(c, {"rows": _rows_hash(rows)})  # what a resume checks
    return _MODEL_SECONDS[0] - before, reused


def _markers(staging: Location) -> Markers:
    return Markers(staging.child("_work"), "embed")


def _rows_hash(rows: np.ndarray) -> str:
    return f"{wf.HASH}:{wf.content_hash(rows):016x}"


def _chunks_to_do(staging: Location, nchunks: int, chunk_rows: int) -> list[int]:
    """The chunks of a local staging matrix still to embed: those without a marker, and
    those whose rows are not what their marker says was written (a killed run's rows
    changed since: said, and embedded again)."""
    matrix = np.load(os.path.join(staging.path, "matrix.npy"), mmap_mode="r")
    todo, markers = [], _markers(staging)
    for c in range(nchunks):
        if not markers.done(c):
            todo.append(c)
            continue
        rows = matrix[c * chunk_rows : (c + 1) * chunk_rows]
        if markers.read(c).get("rows") != _rows_hash(rows):  # an older one: again
            sys.stderr.write(
                f"fgram: warning: {os.path.join(staging.path, 'matrix.npy')}: the rows of chunk "
                f"{c} are not as they were written; embedded again\n"
            )
            todo.append(c)
    return todo


embed_task = as_task(embed_chunk)


def _chunk(staging: Location, c: int) -> Location:
    return staging.child("chunks", f"{c:08d}.npy")


def run_embed(cfg: EmbedConfig, spark=None) -> dict:
    """Run `fgram embed`; returns the metadata. Spark runs the chunks unless ``cfg.engine``
    is local (or auto, resolved to local where Spark would run on this machine alone)."""
    t0 = time.time()
    return sequence.run(EmbedJob(begin(cfg, spark), spark, t0))


class EmbedJob(Job):
    """`fgram embed` in the run sequence: the model and the table checked first; the lock
    of the table's embeddings (one writer: held before the staging folder exists, so
    `fgram clean` never finds a live embed's rows unlocked); a staging folder that a
    rerun with the same parameters continues chunk by chunk; the embed stage; the
    matrix published as the table's part (`_publish_here`, `_publish_on_store`)."""

    what = "embed run"
    kept = "the embedded chunks"
    again = "rerun it"  # the same parameters continue from the chunks done
    head_start = False  # the model is loaded where the chunks run

    def __init__(self, cfg: EmbedConfig, spark, t0: float) -> None:
        super().__init__(cfg, spark)
        self.t0 = t0

    def check(self) -> None:
        cfg = self.cfg
        model_factory(cfg.model)  # a wrong --model first, before the table and the output
        table_part(cfg.table, "embeddings", cfg.overwrite, cfg.storage)  # unless --overwrite
        self.table, manifest = open_table(cfg.table, cfg.storage)
        self.total, self.max_len = int(manifest["fgrams"]), int(manifest["config"]["max_len"])
        self.params = {
            "model": cfg.model,
            "device": cfg.device,
            "dtype": cfg.float,
            "chunk_rows": cfg.chunk_rows,
            "table": manifest_fingerprint(self.table),
            "rows": self.total,
            "reuse": cfg.reuse and cfg.reuse.uri,
        }
        # a table on an object store, chunks on a cluster: a chunk an object on the store
        self.on_store = not self.table.local and not runs_here(cfg)

    def output(self) -> Location:
        return self.table.child("embeddings")

    @contextlib.contextmanager
    def lock(self, where):
        with OutputLock(where):
            yield where

    def places(self, out: Location) -> Location:
        if self.on_store:
            return self.table.child("_embeddings-staging")
        return here(out.path + ".staging" if self.table.local else staging_path(out))

    def claim(self, staging: Location) -> bool:
        cfg, total = self.cfg, self.total
        self.nchunks = nchunks = -(-total // cfg.chunk_rows)
        if self.on_store:
            self.chunks = staging  # an object per chunk, on the store
            record = staging.child("params.json")
            resumed = record.exists() and record.read_json() == self.params
            if not resumed:
                staging.remove_tree()
                first = _first_row(cfg, self.table, total, self.max_len)
                record.write_json({**self.params, "dim": int(first.shape[1]) if total else 0})
            self.dim = int(record.read_json()["dim"])
            have = set(staging.child("chunks").files())
            self.todo = [c for c in range(nchunks) if f"{c:08d}.npy" not in have]
            return resumed
        params_path = staging.child("params.json")
        self.matrix = path = os.path.join(staging.path, "matrix.npy")
        resumed = (
            os.path.exists(params_path.path)
            and load_json(params_path) == self.params
            and os.path.exists(path)
        )
        if not resumed:
            shutil.rmtree(staging.path, ignore_errors=True)
            os.makedirs(staging.path)
            first = _first_row(cfg, self.table, total, self.max_len)
            width = first.shape[1] if total else 0
            np.lib.format.open_memmap(
                path, mode="w+", dtype=storage_dtype(cfg.float), shape=(total, width)
            )
            save_json(params_path, self.params)
        self.todo = _chunks_to_do(staging, nchunks, cfg.chunk_rows)
        return resumed

    def stages(self, run: Run) -> dict:
        cfg, table = self.cfg, self.table
        PROGRESS.stage("embed", len(self.todo), unit="chunks")
        embedding = EmbedStage(cfg, table, self.todo, self.total, self.max_len, run.staging)
        # local: every chunk in this process (one model loaded, the device's own threads)
        ran = []
        if self.todo:
            ran = run.executor(processes=1).map(len(self.todo), embedding.run, progress=True)
        done = embedding.summary(ran)
        dim = self.dim if self.on_store else int(np.load(self.matrix, mmap_mode="r").shape[1])
        return _meta(cfg, self.params, dim, self.nchunks, len(self.todo), done)

    def publish(self, run: Run, meta: dict) -> None:
        if self.on_store:
            _publish_on_store(self.cfg, run.out, self.chunks, meta, self.nchunks, self.t0)
        else:
            _publish_here(run.out, run.staging, meta, self.t0)


def _publish_here(final: Location, where: Location, meta: dict, t0: float) -> None:
    """The matrix staged on this machine published as ``final`` (the table's embeddings):
    renamed into place beside a local table, uploaded (its own generation,
    ``embeddings.json`` last) for one on a store."""
    staging = where.path
    path = os.path.join(staging, "matrix.npy")
    shutil.rmtree(os.path.join(staging, "_work"), ignore_errors=True)  # markers too
    os.remove(os.path.join(staging, "params.json"))
    record = file_record(path)  # bytes, sha256 and xxh3, in one read of the matrix
    meta["sha256"] = record["sha256"]
    meta["seconds"] = round(time.time() - t0, 3)
    if not final.local:
        publish_parts(staging, final, meta, "embeddings.json")
        shutil.rmtree(staging, ignore_errors=True)
        return
    # what `FgramStore.open` (size, xxh3) and `fgram verify` (sha256) check
    meta["files"] = {"matrix.npy": {"object": "matrix.npy", **record}}
    save_json(where.child("embeddings.json"), meta)
    old = final.path + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final.path):
        os.rename(final.path, old)
    os.rename(staging, final.path)
    shutil.rmtree(old, ignore_errors=True)


def _first_row(cfg: EmbedConfig, table: Location, total: int, max_len: int) -> np.ndarray:
    """The model's output for the first f-gram (the row width; a row of zeros if none)."""
    if not total:
        return np.zeros((0, 0), np.float32)
    return _chunk_rows(_model(cfg.model, cfg.device), _dataset(table), 0, 1, max_len, 1)[0]


@dataclass(frozen=True)
class EmbedStage(Stage, name="embed"):
    """Embed a chunk of rows per task (`embed_task`); the summary is the model's time."""

    cfg: EmbedConfig
    table: Any  # the table's `Location`
    todo: list[int]  # the chunks still to embed
    total: int  # rows
    max_len: int
    staging: Location

    def run(self, task: int) -> tuple[float, int]:
        return embed_task(
            self.cfg, self.table, self.todo[task], self.total, self.max_len, self.staging
        )

    def summary(self, results: list[tuple[float, int]]) -> dict:
        return {"seconds": sum(r[0] for r in results), "reused": sum(r[1] for r in results)}


def _meta(cfg: EmbedConfig, params: dict, dim: int, nchunks: int, ran: int, done: dict) -> dict:
    """embeddings.json (``done``: the chunks' model seconds and rows copied from
    ``cfg.reuse``; a resumed run counts those of its own chunks)."""
    return {
        "format": "fgram-embeddings",
        "version": 1,
        "rows": params["rows"],
        "dim": dim,
        "dtype": cfg.float,
        "model": cfg.model,
        "table": params["table"],
        "chunk_rows": cfg.chunk_rows,
        "chunks": nchunks,
        "chunks_resumed": nchunks - ran,
        "engine": cfg.engine,
        "device": cfg.device,
        "model_seconds": round(done["seconds"], 3),
        "rows_reused": done["reused"],
        "reused_from": cfg.reuse and cfg.reuse.uri,
    }


def _publish_on_store(
    cfg: EmbedConfig, final: Location, staging: Location, meta: dict, nchunks: int, t0: float
) -> None:
    """A chunk an object on the store (their cluster's executors wrote them): streamed
    into one matrix object of its own generation, then ``embeddings.json`` names it."""
    import uuid

    name = generation_name("matrix.npy", uuid.uuid4().hex[:12])
    sha, size = wf.concat_arrays(
        final.child(name),
        [_chunk(staging, c) for c in range(nchunks)],
        storage_dtype(cfg.float),
        (meta["rows"], meta["dim"]),
    )
    meta["sha256"] = sha
    meta["files"] = {"matrix.npy": {"object": name, "sha256": sha, "bytes": size}}
    meta["seconds"] = round(time.time() - t0, 3)
    commit_generation(final, {}, [("embeddings.json", json_bytes(meta))], written=(name,))
    staging.remove_tree()
