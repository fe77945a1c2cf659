"""FgramStore lookup speed: embed_last / step at a batch, embed_sequence, RAM vs mmap (warm, cold).

    python bench/bench_store.py OUT CORPUS.bin [--batch 16] [--steps 2000]

OUT: a build with an index and embeddings; CORPUS.bin: uint16 tokens (the
contexts are slices of it). "cold" evicts the matrix file from the page
cache before each timed call (posix_fadvise DONTNEED, no root needed), so
every row read is a disk read.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fgram.pipeline.tables.embed import FgramStore


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def arguments() -> argparse.Namespace:
    """The options both store benchmarks take."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("corpus")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--offset", type=int, default=400_000_000)
    return ap.parse_args()


def contexts(args: argparse.Namespace) -> np.ndarray:
    """[batch, steps + 64] tokens from the corpus at --offset: step s's contexts are [:, s:s+64]."""
    b, n = args.batch, args.steps
    return (
        np.fromfile(args.corpus, dtype=np.uint16, count=b * (n + 64), offset=2 * args.offset)
        .astype(np.int64)
        .reshape(b, n + 64)
    )


def main() -> None:
    args = arguments()
    b, n = args.batch, args.steps
    raw = contexts(args)
    matrix = os.path.join(args.out, "embeddings", "matrix.npy")
    for mode in ("ram", "mmap", "mmap-cold"):
        t = time.perf_counter()
        store = FgramStore.open(args.out, mode="ram" if mode == "ram" else "mmap")
        opened = time.perf_counter() - t
        store.embed_last(raw[:, :8])  # compile / warm the code paths
        store.step(store.start(b), raw[:, 0])
        store.embed_sequence(raw[0, :100])
        cold = mode == "mmap-cold"
        reps = min(200, n) if cold else n
        # decoding, one token per sequence: embed_last over each context's tail
        total = 0.0
        for s in range(reps):
            if cold:
                evict(matrix)
            ctx = raw[:, s : s + 64]
            t = time.perf_counter()
            store.embed_last(ctx)
            total += time.perf_counter() - t
        last_us = total / (reps * b) * 1e6
        state = store.start(b)
        total = 0.0
        for s in range(reps):
            if cold:
                evict(matrix)
            t = time.perf_counter()
            store.step(state, raw[:, s])
            total += time.perf_counter() - t
        step_us = total / (reps * b) * 1e6
        seq = raw.reshape(-1)[:1_000_000]
        if cold:
            evict(matrix)
        t = time.perf_counter()
        store.embed_sequence(seq)
        seq_us = (time.perf_counter() - t) / len(seq) * 1e6
        print(
            f"{mode:9s} open {opened * 1e3:7.1f} ms  embed_last {last_us:7.2f} us/token  "
            f"step {step_us:7.2f} us/token (batch {b})  embed_sequence {seq_us:6.3f} us/token"
        )


if __name__ == "__main__":
    main()
