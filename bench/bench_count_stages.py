"""Inside one count task: where a unit's nanoseconds per candidate go, kernel by kernel,
one core, against the floors of the same bytes.

    python bench/bench_count_stages.py CORPUS.bin|FOLDER [--tokens 16777216] [--dtype uint16]
        [--doc-sep ID] [--max-len 5] [--min-count 5] [--rounds 3]

A unit is the first ``--tokens`` tokens of the corpus (fgram's default unit). For each
pass k = 2..K it runs what `count_task` runs, each kernel timed alone (best of
``--rounds``): the prefix ids at every position (`ids_at`, k > 2), the bucket-size
estimate (`candidate_histogram` on every 32nd position), the scatter into buckets
(`scatter_exact`), the buckets' sorts alone, then the sorts each followed by the
bucket's runs while it is in cache (`sorted_runs`: distinct keys, counts, positions
grouped by key), as `unit_table` does; for the last pass, the whole `unit_table` of a
pass that keeps no order (each candidate's key bits alone, one uint32 word). The next
pass's prefix ids are the ranks of the unit's own keys with count >= --min-count (a
unit's stand-in for the global frequent set). Floors,
per candidate: numpy's sort of cache-sized slices of random uint64 keys, a sequential
copy of 8 bytes, and a scatter of 8-byte words into as many buckets as the pass uses.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import time
from functools import partial

import numpy as np

from fgram.pipeline.kernels import counting as c
from fgram.pipeline.kernels.keys import INVALID, KeyCode
from fgram.pipeline.kernels.runs import sorted_runs
from fgram.pipeline.kernels.scratch import Scratch

HERE = os.path.dirname(os.path.abspath(__file__))


def best(fn, rounds: int) -> float:
    t = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def load(corpus: str, n: int, dtype: str | None, sep: int | None) -> np.ndarray:
    files = (
        [corpus]
        if os.path.isfile(corpus)
        else sorted(glob.glob(f"{corpus}/**/*.bin", recursive=True))
    )
    manifest = os.path.join(corpus, "manifest.json")
    m = json.load(open(manifest)) if os.path.isfile(manifest) else {}
    dtype = dtype or m.get("dtype", "uint16")
    sep = sep if sep is not None else m.get("doc_sep", 0)
    parts, have = [], 0
    for f in files:
        parts.append(np.fromfile(f, dtype=dtype, count=n - have))
        have += len(parts[-1])
        if have >= n:
            break
    raw = np.concatenate(parts)
    tokens = raw.astype(np.uint32)
    tokens[raw == sep] = INVALID
    return tokens


def one_pass(ids, tokens, k, code, rounds, scratch) -> tuple[dict, tuple]:
    """Each kernel of pass k alone; returns (seconds by kernel, and what the next pass
    needs: the order and the unit's keys' counts)."""
    n_pos = len(tokens) - k + 1
    pos_bits = max(int(n_pos - 1).bit_length(), 1)
    bits = max(1, int(np.ceil(np.log2(n_pos / c.BUCKET))))
    bits = min(max(bits, code.bits + pos_bits - 64), code.bits)
    shift = np.uint64(code.bits - bits)
    cands = (ids, tokens, k, n_pos, code.args(), shift)
    t = {}
    est = np.zeros(1 << bits, np.int64)
    t["estimate"] = best(lambda: (est.fill(0), c.candidate_histogram(cands, c.SAMPLE, est)), rounds)
    hist = np.zeros(1 << bits, np.int64)
    c.candidate_histogram(cands, 1, hist)
    bounds = c.bucket_bounds(hist)
    packed = np.empty(int(bounds[-1]), np.uint64)
    ends = np.empty(1 << bits, np.int64)
    t["scatter"] = best(
        lambda: c.scatter_exact(cands, np.uint64(pos_bits), bounds, packed, ends), rounds
    )
    scattered = packed.copy()

    def sort():
        packed[:] = scattered
        c.sort_buckets(packed, bounds[:-1], bounds[1:])

    t["sort (and a copy)"] = best(sort, rounds)
    n = len(packed)
    runs = (
        np.empty(n, np.uint64),
        np.empty(n, np.uint32),
        np.empty(n + 1, np.int32),
        np.empty(n, np.int32),
    )
    u = [0]

    def walk():
        packed[:] = scattered
        u[0] = sorted_runs(packed, bounds[:-1], bounds[1:], shift, pos_bits, code.up, n_pos, runs)

    t["sort and runs, bucket by bucket (and a copy)"] = best(walk, rounds)
    keys, counts, starts, order = runs
    return t, (order, starts[: u[0] + 1], counts[: u[0]], n, bits)


def floors(n: int, seed: int, rounds: int) -> dict[str, float]:
    """numpy's sort of n random uint64 keys in cache-sized slices, and a copy of them."""
    keys = np.random.default_rng(seed).integers(0, 2**63, n, dtype=np.uint64)

    def sort() -> None:
        work = keys.copy()
        for at in range(0, n, c.BUCKET):
            work[at : at + c.BUCKET].sort()

    return {
        "floor: sort in slices (and a copy)": best(sort, rounds),
        "floor: copy": best(keys.copy, rounds),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--tokens", type=int, default=1 << 24)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--doc-sep", type=int, default=None)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tokens = load(args.corpus, args.tokens, args.dtype, args.doc_sep)
    top = int(tokens[tokens != INVALID].max())
    c.unit_table(tokens[:100000], tokens[:100000], 2, 99999, True)  # compile
    ids, kept = tokens, None
    rows = []
    for k in range(2, args.max_len + 1):
        code = KeyCode.fitting(top, top) if k == 2 else KeyCode.fitting(kept - 1, top)
        t, (order, starts, counts, n, bits) = one_pass(ids, tokens, k, code, args.rounds, None)
        frequent = counts >= args.min_count
        kept = max(int(frequent.sum()), 1)
        answers = np.where(frequent, np.cumsum(frequent) - 1, INVALID).astype(np.uint32)
        if k < args.max_len:
            held = Scratch()  # a worker's: the same pages from one unit to the next
            t["ids_at (next pass)"] = best(
                partial(c.ids_at, answers, (order, starts), len(tokens), held), args.rounds
            )
            ids = c.ids_at(answers, (order, starts), len(tokens), held)
        else:  # what the last pass runs: its keys alone, one uint32 word each where they fit
            work = Scratch()
            t["last pass: unit_table, counts only"] = best(
                partial(c.unit_table, ids, tokens, k, len(tokens), False, code, scratch=work),
                args.rounds,
            )
        t.update(floors(n, k, args.rounds))
        row = {
            "k": k,
            "candidates": n,
            "distinct": len(counts),
            "frequent": kept,
            "key_bits": code.bits,
            "buckets": 1 << bits,
            "ns": {name: s / max(n, 1) * 1e9 for name, s in t.items()},
        }
        rows.append(row)
        print(
            f"pass {k}: {n:,} candidates, {len(counts):,} distinct, {kept:,} frequent, "
            f"{code.bits}-bit keys, {1 << bits} buckets"
        )
        for name, ns in row["ns"].items():
            print(f"  {name:36s} {ns:6.2f} ns per candidate")
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        f.write(
            json.dumps(
                {
                    "bench": "count_stages",
                    "machine": platform.machine(),
                    "corpus": args.corpus,
                    "tokens": len(tokens),
                    "passes": rows,
                }
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
