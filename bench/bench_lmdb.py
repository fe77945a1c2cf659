"""The paper's disk choice side by side: an LMDB store keyed by the f-gram's token bytes.

    python bench/bench_lmdb.py OUT CORPUS.bin [--batch 16] [--steps 2000]

Loads OUT's embeddings (rows as stored) into OUT/lmdb-bench-<sha>/ (key: the
f-gram's tokens as little-endian int32 bytes; value: its row), then times
decoding lookups at a batch, side by side with FgramStore on the same
contexts: for each context, LMDB tries lengths K..2 of its tail until a key
exists (what a key-value store needs without the chained index), FgramStore
runs `embed_last` (mmap mode). Both warm (page cache) and cold (LMDB's data
file and the embedding matrix evicted before each call; the index stays warm). Checks
both return the same rows.
Needs the bench extra: pip install lmdb.
"""

from __future__ import annotations

import os
import sys
import time

import lmdb
import numpy as np
import pyarrow.dataset as ds

from fgram.pipeline.tables.embed import FgramStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_store import arguments, contexts, evict  # noqa: E402


def load(out: str, path: str, matrix: np.ndarray) -> None:
    if os.path.exists(os.path.join(path, "data.mdb")):
        return
    t = time.perf_counter()
    env = lmdb.open(path, map_size=2 * matrix.nbytes + (1 << 30), writemap=True, sync=False)
    dataset = ds.dataset(os.path.join(out, "fgrams"), format="parquet")
    items = []
    for batch in dataset.to_batches(columns=["fgram_id", "tokens"], batch_size=1 << 18):
        ids = batch.column(0).to_numpy()
        toks = batch.column(1).to_pylist()
        items.extend((np.asarray(tk, "<i4").tobytes(), int(i)) for i, tk in zip(ids, toks))
    items.sort()  # append in key order: LMDB's fast path
    with env.begin(write=True) as txn:
        cur = txn.cursor()
        for key, i in items:
            cur.put(key, matrix[i].tobytes(), append=True)
    env.sync()
    env.close()
    print(f"loaded {len(items)} rows into LMDB in {time.perf_counter() - t:.1f}s")


def main() -> None:
    args = arguments()
    store = FgramStore.open(args.out, mode="mmap")
    # one LMDB per embeddings version (a rerun of fgram embed gets a fresh one)
    path = os.path.join(args.out, f"lmdb-bench-{store.meta['sha256'][:12]}")
    load(args.out, path, store.matrix)
    env = lmdb.open(path, readonly=True, lock=False, readahead=False)
    b, n, k = args.batch, args.steps, store.max_len
    raw = contexts(args)
    dt = store.matrix.dtype

    def lmdb_last(txn, ctx):
        rows = np.zeros((len(ctx), store.dim), dt)
        for r, c in enumerate(ctx):
            tail = np.asarray(c[-k:], "<i4")
            for length in range(min(k, len(tail)), 1, -1):
                v = txn.get(tail[-length:].tobytes())
                if v is not None:
                    rows[r] = np.frombuffer(v, dt)
                    break
        return rows

    with env.begin() as txn:  # touch what the warm runs will read: truly warm
        for s in range(n):
            lmdb_last(txn, raw[:, s : s + 64])
            store.embed_last(raw[:, s : s + 64])
    for mode in ("warm", "cold"):
        reps = n if mode == "warm" else min(200, n)
        t_l = t_s = 0.0
        with env.begin() as txn:
            for s in range(reps):
                ctx = raw[:, s : s + 64]
                if mode == "cold":
                    evict(os.path.join(path, "data.mdb"))
                t = time.perf_counter()
                a = lmdb_last(txn, ctx)
                t_l += time.perf_counter() - t
                if mode == "cold":
                    evict(os.path.join(args.out, "embeddings", "matrix.npy"))
                t = time.perf_counter()
                rows, _, _ = store.embed_last(ctx)
                t_s += time.perf_counter() - t
                assert np.array_equal(a, rows), "LMDB and FgramStore disagree"
        print(
            f"{mode}: LMDB {t_l / (reps * b) * 1e6:8.2f} us/token, FgramStore (mmap) "
            f"{t_s / (reps * b) * 1e6:8.2f} us/token, batch {b}; "
            f"ratio {t_l / t_s:.1f}x"
        )


if __name__ == "__main__":
    main()
