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
the coverage: positions by match length.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from fgram import __version__
from fgram.jobs.executors import as_task, make_executor
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.index import FgramIndex, manifest_fingerprint
from fgram.pipeline.inputs import (ReadOptions, Shard, Unit, check_range, list_column, plan_shards,
                                   plan_units, read_flat_range, read_row_groups, reading,
                                   shard_record)
from fgram.pipeline.publish import check_output, discard, finish, staging_dir
from fgram.pipeline.storage import is_remote, public_options
from fgram.pipeline.table import arrow_list
from fgram.pipeline.versions import resolve_table


@dataclass
class AnnotateConfig:
    table: str
    inputs: list[str]
    output: str | None = None          # None: coverage only, nothing written
    column: str = "tokens"
    dtype: str = "uint16"
    doc_sep: int | None = None
    unit_tokens: int = 16 * 2**20
    overwrite: bool = False
    engine: str = "spark"
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    storage: dict[str, str] = field(default_factory=dict)   # --storage-option (secrets inside)

    def read_options(self) -> ReadOptions:
        return ReadOptions(column=self.column, dtype=self.dtype, doc_sep=self.doc_sep,
                           storage=self.storage)


_INDEX: dict[str, FgramIndex] = {}


def _index(table: str, storage: dict | None = None) -> FgramIndex:
    if table not in _INDEX:
        _INDEX.clear()
        _INDEX[table] = FgramIndex.open(table, storage=storage)
    return _INDEX[table]


def sidecar(folder: str, shard: Shard, what: str) -> str:
    return os.path.join(folder, f"{os.path.basename(shard.uri)}.{what}.npy")


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
def annotate_task(cfg: AnnotateConfig, shards: list[Shard], units: list[Unit], u: int,
                  folder: str | None) -> list[int]:
    index = _index(cfg.table, cfg.storage)
    unit, shard = units[u], shards[units[u].shard]
    k = index.max_len
    if shard.format == "flat":
        lo = max(unit.start - (k - 1), 0)
        raw = read_flat_range(shard, lo, unit.stop, storage=cfg.storage)
        fid, mlen = match_flat(index, raw, cfg.doc_sep, shard.uri)
        fid, mlen = fid[unit.start - lo:], mlen[unit.start - lo:]
        if folder is not None:
            ids = np.load(sidecar(folder, shard, "fgid"), mmap_mode="r+")
            lens = np.load(sidecar(folder, shard, "mlen"), mmap_mode="r+")
            ids[unit.start:unit.stop] = fid
            lens[unit.start:unit.stop] = mlen
            ids.flush()
            lens.flush()
            del ids, lens
    else:
        import pyarrow.parquet as pq

        with reading(shard.uri):
            table = read_row_groups(shard, unit, None, cfg.storage)
            lengths, values = list_column(table, cfg.column, shard.uri)
        check_range(values, shard.uri)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        fid, mlen = index.match(values, doc_starts=starts[lengths > 0])
        if folder is not None:
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            id_type = np.int32 if index.meta["fgrams"] < 2**31 else np.int64
            out = table.drop_columns([cfg.column])
            out = out.append_column("fgram_ids", arrow_list(offsets, fid, id_type))
            out = out.append_column("match_len", arrow_list(offsets, mlen))
            stem = os.path.splitext(os.path.basename(shard.uri))[0]
            path = os.path.join(folder, f"{stem}.{unit.start:06d}.parquet")
            pq.write_table(out, path + ".tmp", compression="zstd")
            os.replace(path + ".tmp", path)
    return np.bincount(mlen, minlength=k + 1).tolist()


def coverage_table(hist: list[int]) -> dict:
    """Shares of positions by match length (the separators excluded) and the mean length."""
    positions = sum(hist[1:])
    by_len = {str(length): hist[length] for length in range(2, len(hist))}
    mean = (sum(length * n for length, n in enumerate(hist) if length >= 1) / positions
            if positions else 0.0)
    return {"positions": positions, "unmatched": hist[1] if len(hist) > 1 else 0,
            "matched_by_length": by_len, "mean_match_length": round(mean, 4),
            "share_unmatched": round(hist[1] / positions, 6) if positions else 0.0,
            "share_by_length": {k: round(v / positions, 6) if positions else 0.0
                                for k, v in by_len.items()}}


def run_annotate(cfg: AnnotateConfig, spark=None) -> dict:
    """Tag the shards (or only measure coverage when cfg.output is None); returns the manifest."""
    t0 = time.time()
    if cfg.engine not in ("spark", "local"):
        raise ConfigError(f"--engine must be spark or local, got {cfg.engine!r}")
    if cfg.output and is_remote(cfg.output):
        raise ConfigError(f"{cfg.output}: tags are written to a local or shared folder; an "
                          f"object-store output is not supported by annotate yet")
    table = resolve_table(cfg.table, cfg.storage)
    index = FgramIndex.open(table, storage=cfg.storage)
    out = check_output(cfg.output, cfg.overwrite).path if cfg.output else None
    shards = plan_shards(cfg.inputs, cfg.read_options())
    units = plan_units(shards, cfg.unit_tokens)
    names = [os.path.basename(s.uri) for s in shards]
    if len(set(names)) != len(names):
        raise ConfigError("two inputs share a file name; tags are named after their input files")
    ex = make_executor(cfg.engine, spark, cfg.master, cfg.conf)
    staging = staging_dir(out) if out else None
    try:
        folder = None
        if staging:
            folder = os.path.join(staging, "tags")
            os.makedirs(folder)
            for shard in shards:
                if shard.format == "flat":
                    ids_type = np.int32 if index.meta["fgrams"] < 2**31 else np.int64
                    np.lib.format.open_memmap(sidecar(folder, shard, "fgid"), mode="w+",
                                              dtype=ids_type, shape=(shard.n_items,))
                    np.lib.format.open_memmap(sidecar(folder, shard, "mlen"), mode="w+",
                                              dtype=np.uint8, shape=(shard.n_items,))
        hists = ex.map(len(units), lambda u: annotate_task(cfg, shards, units, u, folder))
        k = index.max_len
        hist = [sum(h[i] for h in hists) for i in range(k + 1)]
        manifest = {"fgram_version": __version__, "kind": "fgram-tags",
                    "table": {"path": table.uri,
                              "fingerprint": manifest_fingerprint(table),
                              "fgrams": index.meta["fgrams"], "max_len": k},
                    "config": {**asdict(cfg), "output": out,
                               "storage": public_options(cfg.storage)},
                    "inputs": [shard_record(s) for s in shards],
                    "units": [{"shard": un.shard, "start": un.start, "stop": un.stop}
                              for un in units],
                    "coverage": coverage_table(hist),
                    "layout": {"parquet": "<stem>.<first row group>.parquet: input columns but "
                                          "the tokens, fgram_ids list<int>, match_len list<uint8>",
                               "flat": "<name>.fgid.npy, <name>.mlen.npy aligned with the tokens; "
                                       "separators: id -1, length 0"},
                    "seconds": round(time.time() - t0, 3)}
        if staging:
            finish(staging, out, manifest)
        return manifest
    except BaseException:
        if staging:
            discard(staging)
        raise


def main(argv=None) -> None:
    """`spark-submit fgram/jobs/annotate.py OUT SHARDS... -o TAGS` (same options as the CLI)."""
    from fgram.cli import cli
    cli.main(args=["annotate", *(sys.argv[1:] if argv is None else argv)], prog_name="annotate.py")


if __name__ == "__main__":
    main()
