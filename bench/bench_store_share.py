"""One store, many processes: the memory of N processes that open the same `FgramStore`
and read every row of it, against one process alone, in both modes.

    python bench/bench_store_share.py TABLE [--procs 4]

TABLE: a build with an index and embeddings. Each process opens the store, reads
every row (`rows` of all ids, in chunks) and matches a sequence (the index's pages),
then reports its RSS and PSS (``/proc/self/smaps_rollup``: a shared page counts
1/N in each of the N processes that map it) while all of them are alive. ``mmap``
maps the files (the page cache holds one copy for all); ``ram`` reads a private copy
into each. Prints the sum of PSS over the processes against one alone (the ratio:
1.0 = shared, N = a copy each); appends to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402


def memory() -> dict[str, float]:
    """This process's RSS, PSS and private memory (its own pages) in MiB."""
    got = {"private": 0.0}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                got[key.lower()] = int(rest.split()[0]) / 1024
            if key in ("Private_Clean", "Private_Dirty"):
                got["private"] += int(rest.split()[0]) / 1024
    return got


def reader(table: str, mode: str, ready, done, out) -> None:
    from fgram.pipeline.tables.embed import FgramStore

    store = FgramStore.open(table, mode=mode)
    n = store.meta["rows"]
    total = 0.0
    for a in range(0, n, 65536):  # every row, as lookups over time would touch them
        total += float(store.rows(np.arange(a, min(a + 65536, n)))[:, 0].sum())
    tokens = np.random.default_rng(os.getpid()).integers(1, 50_000, 1_000_000)
    store.embed_sequence(tokens)
    ready.wait()  # all alive and done reading: measure together
    out.put(memory())
    done.wait()


def run(table: str, mode: str, procs: int) -> list[dict[str, float]]:
    ctx = mp.get_context("spawn")  # fresh processes, nothing inherited
    ready, done, out = ctx.Barrier(procs + 1), ctx.Barrier(procs + 1), ctx.Queue()
    ps = [ctx.Process(target=reader, args=(table, mode, ready, done, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    ready.wait()
    got = [out.get(timeout=600) for _ in ps]
    done.wait()
    for p in ps:
        p.join()
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("--procs", type=int, default=4)
    args = ap.parse_args()
    rows = []
    for mode in ("mmap", "ram"):
        one = run(args.table, mode, 1)
        many = run(args.table, mode, args.procs)
        pss1, pssn = one[0]["pss"], sum(m["pss"] for m in many)
        rows.append(
            {
                "mode": mode,
                "one_pss": pss1,
                "one_rss": one[0]["rss"],
                "many_pss": pssn,
                "many_rss_each": [m["rss"] for m in many],
                "many_private_each": [m["private"] for m in many],
                "ratio": pssn / pss1,
            }
        )
    size = sum(
        os.path.getsize(os.path.join(d, f))
        for sub in ("index", "embeddings")
        for d, _, fs in os.walk(os.path.join(args.table, sub))
        for f in fs
    )
    print(f"store files (index + embeddings): {size / 2**20:.0f} MiB; {args.procs} processes")
    print(
        f"| mode | 1 process: PSS (RSS) | {args.procs} processes: sum of PSS | "
        "private to each | ratio |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        each = statistics.mean(r["many_private_each"])
        print(
            f"| {r['mode']} | {r['one_pss']:.0f} MiB ({r['one_rss']:.0f}) | "
            f"{r['many_pss']:.0f} MiB | {each:.0f} MiB | {r['ratio']:.2f} |"
        )
    record = {"bench": "store_share", "machine": machine(), "procs": args.procs, "rows": rows}
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
