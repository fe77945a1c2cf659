"""FgramIndex: open time and match throughput on a build output.

    python bench/bench_index.py OUT CORPUS.bin [--tokens 16000000]

CORPUS.bin: uint16 tokens with separator 0 (documents split there).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fgram.pipeline.tables.index import FgramIndex, write_index


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("corpus")
    ap.add_argument("--tokens", type=int, default=16_000_000)
    ap.add_argument("--offset", type=int, default=0, help="first token read (held-out slice)")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.out, "index", "index.json")):
        t = time.perf_counter()
        meta = write_index(args.out)
        print(f"index built in {time.perf_counter() - t:.1f}s: {meta['fgrams']} f-grams")
    raw = np.fromfile(args.corpus, dtype=np.uint16, count=args.tokens, offset=2 * args.offset)
    seps = np.flatnonzero(raw == 0)
    starts = seps[seps + 1 < len(raw)] + 1
    tokens = raw.astype(np.int64)
    indexes = {}
    for mode in ("mmap", "ram"):
        t = time.perf_counter()
        indexes[mode] = FgramIndex.open(args.out, mode=mode)
        print(f"open ({mode}): {(time.perf_counter() - t) * 1000:.1f} ms")
        indexes[mode].match(tokens[:100_000], doc_starts=starts[starts < 100_000])  # compile
    best = {mode: [] for mode in indexes}
    for _ in range(3):  # alternate the modes: side by side in one run
        for mode, index in indexes.items():
            t = time.perf_counter()
            fid, mlen = index.match(tokens, doc_starts=starts)
            best[mode].append(time.perf_counter() - t)
    for mode, times in best.items():
        dt = min(times)
        print(
            f"match ({mode}): {len(tokens)} tokens in {dt:.2f}s = {len(tokens) / dt / 1e6:.2f}M "
            f"tokens/s (one process, best of 3); matched {np.mean(fid >= 0):.1%}, "
            f"mean length {mlen.mean():.2f}"
        )


if __name__ == "__main__":
    main()
