"""Side by side: the select's rank tasks (number rows of whole (count, length) groups and
write them as Parquet), this checkout's `table.write_ranked` against another version of
`fgram/pipeline/formats/table.py`, on the rows of a real table.

    git show REV:fgram/pipeline/formats/table.py > /tmp/table_rev.py
    python bench/bench_rank.py TABLE_DIR --against /tmp/table_rev.py [--tasks 4] [--repeat 3]

TABLE_DIR: an f-gram table (a build's or a version's `fgrams/`). Its rows are split
by length and shuffled (the rank tasks get them in hash-key order), histograms and
groups are made as the select makes them, then every rank task's rows are written
by each implementation in turn; the outputs must be equal. Prints seconds per
implementation (sum over tasks, one process).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

from fgram.pipeline.formats import table as tb
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.selection import selection


def load_rows(path: str, seed: int = 0) -> dict:
    t = pq.read_table(path, columns=["length", "tokens", "count"])
    length = t.column("length").to_numpy()
    counts = t.column("count").to_numpy()
    flat = t.column("tokens").combine_chunks().values.to_numpy().astype(np.uint32)
    starts = np.concatenate([[0], np.cumsum(length.astype(np.int64))[:-1]])
    rng = np.random.default_rng(seed)
    rows = {}
    for k in np.unique(length):
        idx = np.flatnonzero(length == k)
        rng.shuffle(idx)
        toks = flat[starts[idx][:, None] + np.arange(k)]
        rows[int(k)] = (toks, counts[idx])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--against", help="another version of fgram/pipeline/formats/table.py")
    a = ap.parse_args()
    rows = load_rows(a.table)
    hists = {
        k: dict(zip(*[x.tolist() for x in np.unique(c, return_counts=True)]))
        for k, (_, c) in rows.items()
    }
    size = a.size or sum(len(c) for _, c in rows.values())
    cutoff, cut_len, selected, _ = selection(hists, size)
    groups = Groups(hists, cutoff, cut_len)
    firsts = groups.split(a.tasks, selected)
    impls = {"this": tb.write_ranked}
    if a.against:
        spec = importlib.util.spec_from_file_location("fgram.pipeline._against", a.against)
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
        impls["against"] = other.write_ranked
    out = tempfile.mkdtemp()
    try:
        # the rows of each task, as a rank task gets them
        tasks = []
        for r in range(len(firsts)):
            g0, g1, lo, hi = groups.task_span(firsts, r, selected)
            mine = {}
            for k, (toks, cnts) in rows.items():
                m = groups.rows_in(cnts, k, g0, g1)
                mine[k] = (toks[m], cnts[m])
            tasks.append((mine, lo, hi))
        for fn in impls.values():  # warm-up (compiled kernels load)
            mine, lo, hi = tasks[-1]
            fn(mine, groups, lo, hi, os.path.join(out, "w.parquet"))
        times = {n: [] for n in impls}
        for _ in range(a.repeat):
            for name, fn in impls.items():
                t0 = time.perf_counter()
                for r, (mine, lo, hi) in enumerate(tasks):
                    fn(mine, groups, lo, hi, os.path.join(out, f"{name}-{r}.parquet"))
                times[name].append(time.perf_counter() - t0)
        for r in range(len(tasks)):
            ref = pq.read_table(os.path.join(out, f"this-{r}.parquet"))
            for name in impls:
                if not pq.read_table(os.path.join(out, f"{name}-{r}.parquet")).equals(ref):
                    raise SystemExit(f"{name} differs from this checkout's in task {r}")
        print(f"{selected} rows, {len(tasks)} tasks")
        for name, ts in times.items():
            print(f"{name:10s} " + " ".join(f"{t:.2f}" for t in ts) + f"  best {min(ts):.2f} s")
    finally:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
