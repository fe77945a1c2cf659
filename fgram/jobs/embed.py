"""fgram embed: run a model over every f-gram, in fgram_id order, into OUT/embeddings/.

The rows are computed in chunks of ``chunk_rows`` f-grams. Each chunk reads its
id range from the table (row-group statistics prune the rest), pads the
f-grams into ``[B, K]`` batches, runs the model and writes its rows into a
preallocated ``matrix.npy`` in ``OUT/embeddings.staging/``, then a marker.
A run that was killed leaves the staging folder: the next run with the same
table, model, dtype and chunk size skips the chunks that have markers (the
rows are a function of the f-gram only, so the bytes are the same). The last
step writes the checksum and metadata and renames the folder into place.
The chunks run as Spark tasks (each writes its rows into the shared matrix
file, so the output must be on a filesystem every executor reaches), or all
in this process with ``local=True`` (``--local``).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass

import numpy as np

from fgram.jobs.executors import as_task, make_executor
from fgram.pipeline.embed import load_model, storage_dtype, to_stored
from fgram.pipeline.storage import file_sha256, is_remote
from fgram.pipeline.errors import FgramError
from fgram.pipeline.index import manifest_fingerprint
from fgram.pipeline.workdir import save_json


@dataclass
class EmbedConfig:
    table: str                       # a build output
    model: str                       # module:factory
    batch: int = 4096
    dtype: str = "float16"
    chunk_rows: int = 1 << 16
    device: str | None = None        # passed to the model factory (e.g. "cpu", "cuda")
    local: bool = False              # True: every chunk in this process, no Spark
    master: str | None = None
    conf: dict | None = None

    def validate(self) -> None:
        storage_dtype(self.dtype)
        if self.batch < 1 or self.chunk_rows < 1:
            raise FgramError("--batch and the chunk size must be at least 1")
        if is_remote(self.table):
            raise FgramError(f"{self.table}: embeddings are written into a local or shared "
                             f"table folder; an object-store table is not supported by embed yet")
        if not os.path.exists(os.path.join(self.table, "_SUCCESS")):
            raise FgramError(f"{self.table}: not a finished fgram build (no _SUCCESS)")


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


def _chunk_rows(model, dataset, lo: int, hi: int, max_len: int, batch: int) -> np.ndarray:
    import pyarrow.compute as pc
    t = dataset.to_table(columns=["fgram_id", "tokens"],
                         filter=(pc.field("fgram_id") >= lo) & (pc.field("fgram_id") < hi))
    t = t.sort_by("fgram_id")
    ids = t.column("fgram_id").to_numpy()
    if len(ids) != hi - lo or (len(ids) and (ids[0] != lo or ids[-1] != hi - 1)):
        raise FgramError(f"{dataset.files[0]}...: f-gram ids {lo}..{hi - 1} are not all in the table")
    toks, lengths = padded(t.column("tokens").combine_chunks(), max_len)
    outs, t_model = [], time.perf_counter()
    for s in range(0, len(ids), batch):
        outs.append(np.asarray(model(toks[s:s + batch], lengths[s:s + batch]), dtype=np.float32))
    _MODEL_SECONDS[0] += time.perf_counter() - t_model
    rows = np.concatenate(outs) if outs else np.zeros((0, 0), np.float32)
    if rows.ndim != 2 or len(rows) != len(ids):
        raise FgramError(f"model returned shape {rows.shape} for {len(ids)} f-grams; "
                         f"expected [{len(ids)}, d]")
    return rows


_MODELS: dict = {}
_MODEL_SECONDS = [0.0]     # time inside model calls in this process (for the overhead figure)


def _model(spec: str, device: str | None):
    """The model of ``spec`` on ``device``, built once per process."""
    if (spec, device) not in _MODELS:
        _MODELS.clear()
        _MODELS[spec, device] = load_model(spec, device)
    return _MODELS[spec, device]


def embed_chunk(cfg: EmbedConfig, c: int, total: int, max_len: int, staging: str) -> float:
    """Compute chunk c's rows, write them into the staging matrix, then its marker.

    Returns the seconds spent inside the model."""
    import pyarrow.dataset as ds
    before = _MODEL_SECONDS[0]
    dataset = ds.dataset(os.path.join(cfg.table, "fgrams"), format="parquet")
    lo, hi = c * cfg.chunk_rows, min((c + 1) * cfg.chunk_rows, total)
    model = _model(cfg.model, cfg.device)
    rows = to_stored(_chunk_rows(model, dataset, lo, hi, max_len, cfg.batch), cfg.dtype)
    matrix = np.load(os.path.join(staging, "matrix.npy"), mmap_mode="r+")
    if matrix.shape[1] != rows.shape[1]:
        raise FgramError(f"{cfg.model}: rows of width {rows.shape[1]} in chunk {c}, "
                         f"{matrix.shape[1]} in the first")
    matrix[lo:hi] = rows
    matrix.flush()
    del matrix
    with open(os.path.join(staging, "done", f"{c:08d}"), "w"):
        pass
    return _MODEL_SECONDS[0] - before


embed_task = as_task(embed_chunk)


def run_embed(cfg: EmbedConfig, spark=None) -> dict:
    """Run `fgram embed`; returns the metadata. Spark runs the chunks unless ``cfg.local``."""
    import pyarrow.dataset as ds

    cfg.validate()
    t0 = time.time()
    with open(os.path.join(cfg.table, "manifest.json")) as fh:
        manifest = json.load(fh)
    total, max_len = int(manifest["fgrams"]), int(manifest["config"]["max_len"])
    final = os.path.join(cfg.table, "embeddings")
    staging = final + ".staging"
    params = {"model": cfg.model, "device": cfg.device, "dtype": cfg.dtype,
              "chunk_rows": cfg.chunk_rows, "table": manifest_fingerprint(cfg.table), "rows": total}
    params_path = os.path.join(staging, "params.json")
    path = os.path.join(staging, "matrix.npy")
    resumed = os.path.exists(params_path) and json.load(open(params_path)) == params and \
        os.path.exists(path)
    if not resumed:
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(os.path.join(staging, "done"))
        # the row width: the model's output for the first f-gram (a row of zeros if none)
        dataset = ds.dataset(os.path.join(cfg.table, "fgrams"), format="parquet")
        first = _chunk_rows(_model(cfg.model, cfg.device), dataset, 0, min(total, 1), max_len, 1) \
            if total else np.zeros((0, 0), np.float32)
        np.lib.format.open_memmap(path, mode="w+", dtype=storage_dtype(cfg.dtype),
                                  shape=(total, first.shape[1] if total else 0))
        save_json(params_path, params)
    nchunks = -(-total // cfg.chunk_rows)
    todo = [c for c in range(nchunks)
            if not os.path.exists(os.path.join(staging, "done", f"{c:08d}"))]
    if cfg.local:
        model_seconds = sum(embed_chunk(cfg, c, total, max_len, staging) for c in todo)
    elif todo:
        ex = make_executor("spark", spark, cfg.master, cfg.conf)
        model_seconds = sum(ex.map(len(todo), lambda i: embed_task(cfg, todo[i], total,
                                                                  max_len, staging)))
    else:
        model_seconds = 0.0
    shape = np.load(path, mmap_mode="r").shape
    meta = {"format": "fgram-embeddings", "version": 1, "rows": total, "dim": int(shape[1]),
            "dtype": cfg.dtype, "model": cfg.model, "table": params["table"],
            "sha256": file_sha256(path), "chunk_rows": cfg.chunk_rows,
            "chunks": nchunks, "chunks_resumed": nchunks - len(todo),
            "engine": "local" if cfg.local else "spark", "device": cfg.device,
            "model_seconds": round(model_seconds, 3), "seconds": round(time.time() - t0, 3)}
    save_json(os.path.join(staging, "embeddings.json"), meta)
    shutil.rmtree(os.path.join(staging, "done"))
    os.remove(params_path)
    old = final + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.rename(final, old)
    os.rename(staging, final)
    shutil.rmtree(old, ignore_errors=True)
    return meta
