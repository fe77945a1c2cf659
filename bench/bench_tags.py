"""Random-access reading of tags: `FgramTags.windows` at random offsets against
reading the same windows of the token file alone (a memory map, as nanoGPT's loader
does), in alternated rounds.

    python bench/bench_tags.py /tmp/bench/c100/part-00000.bin --tokens 20000000

The corpus: a uint16 ``.bin`` with separator 0. Its first ``--tokens`` tokens are
built into a table (S = 1M, K = 5), indexed and annotated (flat tags), then each
round reads ``--windows`` windows of ``--length`` at the same random offsets both
ways. Prints tokens/s of each and their ratio; appends to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a uint16 .bin with separator 0")
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--windows", type=int, default=2000)
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(HERE, "out", "tags"))
    args = ap.parse_args()
    import fgram

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    corpus = os.path.join(args.work, "corpus.bin")
    np.fromfile(args.corpus, np.uint16, count=args.tokens).tofile(corpus)
    cli = os.path.join(os.path.dirname(sys.executable), "fgram")
    table, tags = os.path.join(args.work, "t"), os.path.join(args.work, "tags")
    common = ["--doc-sep", "0", "-q"]
    subprocess.run([cli, "build", table, corpus, "--size", "1000000", *common], check=True)
    subprocess.run([cli, "index", table, "-q"], check=True)
    subprocess.run([cli, "annotate", table, corpus, "-o", tags, *common], check=True)
    reader = fgram.FgramTags.open(tags)
    tokens = np.memmap(corpus, np.uint16, mode="r")
    rng = np.random.default_rng(0)
    n, length = args.windows, args.length
    reader.windows([0], length)  # the match kernel compiled (or loaded) once, first
    times: dict[str, list[float]] = {"tags": [], "tokens": []}
    for r in range(args.rounds):
        offsets = rng.integers(0, len(reader) - length, n)
        for name in ("tags", "tokens") if r % 2 == 0 else ("tokens", "tags"):
            t0 = time.perf_counter()
            if name == "tags":
                got = reader.windows(offsets, length)[0]
            else:
                got = np.stack([tokens[o : o + length] for o in offsets]).astype(np.int64)
            times[name].append(time.perf_counter() - t0)
            assert got.shape == (n, length)
    rate = {k: [n * length / t for t in v] for k, v in times.items()}
    ratios = [a / b for a, b in zip(times["tags"], times["tokens"], strict=True)]
    print(f"{n} windows of {length} at random offsets of {len(reader):,} positions")
    print("| reader | tokens/s (each round) |\n|---|---|")
    for k, v in rate.items():
        print(f"| {k} | {', '.join(f'{x / 1e6:.1f}M' for x in v)} |")
    print(f"tags / tokens time: {', '.join(f'{x:.2f}' for x in ratios)}")
    record = {"bench": "tags", "machine": machine(), "windows": n, "length": length}
    record |= {"times": times, "median_ratio": statistics.median(ratios)}
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
