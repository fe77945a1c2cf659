"""The build's roofline on this machine: what the memory system and a sort allow, against
what each pass and stage of a build takes, in ns per position.

    python bench/bench_roofline.py [--tokens 50000000] [--corpus FILE.bin|TOKENS] [--rounds 3]

Machine (one core, the best of ``--rounds``): sequential read and write bandwidth (a sum
and a copy of 1 GiB), random 8-byte reads (a gather at random indices over 1 GiB: the
latency-bound rate a hash or id-table lookup meets), and the sort floor (numpy's sort
of 16M random uint64 keys, keys/s). Build: `fgram build` of the corpus (a flat uint16
file, or a folder `fgram tokenize` wrote; synthetic when none is given) on the local
engine with every core, K = 5, min-count 5; from its manifest, each pass's stages
(count, merge, keep) and the selection, as wall seconds and as core-ns per position
(seconds x cores / the pass's candidate positions), beside the floors per position the
bytes they touch would take.
Prints a Markdown table and appends a record to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _best(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def machine(rounds: int) -> dict:
    n = 1 << 27  # 1 GiB of uint64
    a = np.arange(n, dtype=np.uint64)
    b = np.empty_like(a)
    read = _best(lambda: a.sum(), rounds)
    write = _best(lambda: np.copyto(b, a), rounds)  # reads a and writes b
    idx = np.random.default_rng(0).integers(0, n, 1 << 24)
    gather = _best(lambda: a[idx], rounds)
    keys = np.random.default_rng(1).integers(0, 2**63, 1 << 24, dtype=np.uint64)
    sort = _best(lambda: np.sort(keys), rounds)
    return {
        "seq_read_gbs": round(a.nbytes / read / 1e9, 2),
        "seq_copy_gbs": round(2 * a.nbytes / write / 1e9, 2),
        "random_read_ns": round(gather / len(idx) * 1e9, 2),
        "sort_ns_per_key": round(sort / len(keys) * 1e9, 2),
    }


def build(corpus: str, out: str) -> dict:
    import fgram

    t0 = time.perf_counter()
    # a tokenize output names its dtype and separator; a bare flat file is uint16, 0
    tokenized = os.path.isfile(os.path.join(corpus, "manifest.json"))
    flat = {} if tokenized else {"dtype": "uint16", "doc_sep": 0}
    m = fgram.build(out, [corpus], engine="local", overwrite=True, **flat)
    m["wall"] = time.perf_counter() - t0
    return m


def table(m: dict, mach: dict, cores: int) -> list[str]:
    rows = ["| pass | stage | seconds | core-ns / position | candidates |", "|---|---|---|---|---|"]
    total_positions = m["totals"]["tokens"]
    for p in m["passes"]:
        n = max(int(p["candidates"]), 1)
        for stage, sec in p.get("stages", {}).items():
            ns = sec * cores / n * 1e9
            rows.append(f"| {p['length']} | {stage} | {sec:.2f} | {ns:.1f} | {n} |")
    sel = m.get("select", {}).get("seconds", 0.0)
    rows.append(f"| - | select | {sel:.2f} | {sel * cores / total_positions * 1e9:.1f} | - |")
    rows.append(
        f"| all | wall | {m['wall']:.2f} | {m['wall'] * cores / total_positions * 1e9:.1f} "
        f"(per token) | {total_positions} tokens |"
    )
    rows.append("")
    rows.append(
        f"floors per position, one core: a sequential read of 2 bytes "
        f"{2 / mach['seq_read_gbs']:.2f} ns, of an 8-byte key "
        f"{8 / mach['seq_read_gbs']:.2f} ns; a random 8-byte read {mach['random_read_ns']} ns; "
        f"numpy's sort of one uint64 key {mach['sort_ns_per_key']} ns"
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=50_000_000)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    mach = machine(args.rounds)
    with tempfile.TemporaryDirectory(
        dir=os.path.join(HERE, "out") if os.path.isdir(os.path.join(HERE, "out")) else None
    ) as tmp:
        corpus = args.corpus
        if corpus is None:
            from fgram.pipeline.formats.synth import generate

            generate(os.path.join(tmp, "c"), args.tokens, vocab=50_000, seed=0, fmt="bin")
            corpus = os.path.join(tmp, "c")
        m = build(corpus, os.path.join(tmp, "t"))
    lines = table(m, mach, cores)
    print(f"machine: {platform.processor() or platform.machine()}, {cores} cores; {mach}")
    print("\n".join(lines))
    rec = {
        "bench": "roofline",
        "tokens": m["totals"]["tokens"],
        "cores": cores,
        "machine": mach,
        "wall": round(m["wall"], 3),
        "passes": [
            {"length": p["length"], "candidates": p["candidates"], **p.get("stages", {})}
            for p in m["passes"]
        ],
        "select": m.get("select", {}).get("seconds"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
