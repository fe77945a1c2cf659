"""`fgram build` against a single-process numpy reference, the sort-join a data
engineer writes first, on the same flat token shards, in one run, alternated.

    python bench/bench_reference.py bench/out/debian/tokens [--rounds 2] [--max-len 5]
        [--min-count 5] [--dtype uint16] [--doc-sep ID] [--engines auto spark]

The reference (`reference`, run in a process of its own by ``--reference-only``) reads
every ``.bin`` shard, then for k = 1..K: the candidate positions (both (k-1)-grams at i
and i+1 frequent; every token at k = 1), their keys ``id(k-1 prefix) * V + last token``,
numpy's argsort of the keys, the runs of equal keys (counts, first positions), the
frequent keys' ids (their rank) at every position: `np.unique`'s work with fewer copies
(positions int32; `np.unique` with its index, inverse and counts needs ~20 GB at 383M
tokens). No --size: every n-gram of 2..K tokens with count >= --min-count, the
table `fgram build` writes without ``-S``. Its time counts reading and counting, not
writing its result; fgram's is the whole command (start to ``_SUCCESS``), once per
``--engines`` (auto, the default: local processes on this machine; spark: Spark's local
mode), in one round with the reference, the order alternated. After the timed rounds
each engine's table is compared with the reference's row for row (tokens and counts).
Prints the walls, peak memory and the ratio fgram / reference per engine and round, and
appends the records to bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine, run  # noqa: E402


def shards(corpus: str) -> list[str]:
    return (
        [corpus]
        if os.path.isfile(corpus)
        else sorted(glob.glob(os.path.join(corpus, "**", "*.bin"), recursive=True))
    )


def reference(
    files: list[str], max_len: int, min_count: int, dtype: str, sep: int
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{k: (first positions, counts)} of every k-gram (2 <= k <= max_len) inside one
    document with count >= min_count; positions index the shards' concatenation."""
    tokens = np.concatenate([np.fromfile(f, dtype=dtype) for f in files])
    n = len(tokens)
    counts1 = np.bincount(tokens)
    frequent = counts1 >= min_count
    frequent[sep] = False  # the separator is in no n-gram
    rank = (np.cumsum(frequent) - 1).astype(np.int32)
    ids = np.where(frequent[tokens], rank[tokens], -1)  # id of the 1-gram at each position
    width = int(tokens.max()) + 1
    found = {}
    for k in range(2, max_len + 1):
        m = n - k + 1
        pos = np.flatnonzero((ids[:m] >= 0) & (ids[1 : m + 1] >= 0)).astype(np.int32)
        keys = ids[pos].astype(np.int64) * width + tokens[pos + k - 1]
        order = np.argsort(keys)  # numpy's own sort; then the runs of equal keys
        keys = keys[order]
        new = np.empty(len(keys), bool)
        new[:1] = True
        np.not_equal(keys[1:], keys[:-1], out=new[1:])
        del keys
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, len(new)))
        where = pos[order]  # positions in key order
        del order
        keep = counts >= min_count
        found[k] = (
            np.minimum.reduceat(where, starts)[keep] if len(starts) else where,
            counts[keep],
        )
        rank = (np.cumsum(keep) - 1).astype(np.int32)
        group = (np.cumsum(new) - 1).astype(np.int32)
        del new
        ids = np.full(m, -1, np.int32)
        ids[where] = np.where(keep[group], rank[group], -1)
        del where, group, pos
    return found


def rows_of(tokens: np.ndarray, found: dict) -> dict[int, np.ndarray]:
    """{k: (rows, k + 1) array of the k-grams' tokens then count, sorted}."""
    out = {}
    for k, (first, counts) in found.items():
        a = np.stack([tokens[first + j] for j in range(k)] + [counts], axis=1)
        out[k] = a[np.lexsort(a.T[::-1])]
    return out


def table_rows(path: str) -> dict[int, np.ndarray]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    t = ds.dataset(path, format="parquet").to_table(columns=["tokens", "count"])
    lengths = pc.list_value_length(t.column("tokens")).to_numpy()
    flat = pc.list_flatten(t.column("tokens")).to_numpy().astype(np.int64)
    counts = t.column("count").to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    out = {}
    for k in np.unique(lengths):
        rows = np.flatnonzero(lengths == k)
        a = np.stack([flat[offsets[rows] + j] for j in range(k)] + [counts[rows]], axis=1)
        out[int(k)] = a[np.lexsort(a.T[::-1])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a flat .bin shard or a folder of them")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--dtype", default=None, help="default: the folder's manifest, else uint16")
    ap.add_argument("--doc-sep", type=int, default=None, help="default: the manifest's, else 0")
    ap.add_argument("--engines", nargs="+", default=["auto", "spark"], help="fgram's --engine")
    ap.add_argument("--work", default=os.path.join(HERE, "out", "reference"))
    ap.add_argument("--reference-only", metavar="OUT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    manifest = os.path.join(args.corpus, "manifest.json")
    m = json.load(open(manifest)) if os.path.isfile(manifest) else {}
    dtype = args.dtype or m.get("dtype", "uint16")
    sep = args.doc_sep if args.doc_sep is not None else m.get("doc_sep", 0)
    files = shards(args.corpus)
    if args.reference_only:
        t0 = time.perf_counter()
        found = reference(files, args.max_len, args.min_count, dtype, sep)
        seconds = time.perf_counter() - t0
        np.savez(
            args.reference_only,
            **{f"first{k}": v[0] for k, v in found.items()},
            **{f"count{k}": v[1] for k, v in found.items()},
        )
        with open(args.reference_only + ".json", "w") as f:
            json.dump({"seconds": seconds}, f)
        return
    os.makedirs(args.work, exist_ok=True)
    result = os.path.join(args.work, "reference.npz")
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    same = ["--max-len", str(args.max_len), "--min-count", str(args.min_count)]
    same += ["--dtype", dtype, "--doc-sep", str(sep)]
    tables = {e: os.path.join(args.work, f"table-{e}") for e in args.engines}
    commands = {
        f"fgram build --engine {e}": [
            fgram, "build", tables[e], args.corpus, "--overwrite", "--engine", e, *same
        ]
        for e in args.engines
    }  # fmt: skip
    commands["numpy reference"] = [
        sys.executable, __file__, args.corpus, "--reference-only", result, *same
    ]  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", "from fgram.pipeline.kernels.warmup import warm_up; warm_up()"],
        check=True,
    )
    rows = []
    for r in range(args.rounds):
        for case in list(commands)[:: 1 if r % 2 == 0 else -1]:
            wall, peak, rc = run(commands[case])
            if case == "numpy reference" and rc == 0:  # reading and counting, not saving
                wall = json.load(open(result + ".json"))["seconds"]
            if rc:
                sys.exit(f"{case}: exit {rc}")
            rows.append({"case": case, "round": r, "wall": wall, "peak": peak})
            print(f"round {r}: {case:28s} {wall:7.1f} s, peak {peak / 2**30:.2f} GiB", flush=True)
    first = tables[args.engines[0]]
    tokens = json.load(open(os.path.join(first, "manifest.json")))["totals"]["tokens"]
    for r in range(args.rounds):
        walls = {x["case"]: x["wall"] for x in rows if x["round"] == r}
        for case in commands:
            if case == "numpy reference":
                continue
            ratio = walls[case] / walls["numpy reference"]
            print(
                f"round {r}: {case} / reference {ratio:.3f}; "
                f"{tokens / walls[case] / 1e6:.2f}M tokens/s "
                f"({tokens / walls[case] / os.cpu_count() / 1e6:.2f}M per core), "
                f"reference {tokens / walls['numpy reference'] / 1e6:.2f}M tokens/s"
            )
            for x in rows:
                if x["round"] == r and x["case"] == case:
                    x["ratio"] = ratio
    everything = np.concatenate([np.fromfile(f, dtype=dtype) for f in files]).astype(np.int64)
    saved = np.load(result)
    found = {k: (saved[f"first{k}"], saved[f"count{k}"]) for k in range(2, args.max_len + 1)}
    want = rows_of(everything, found)
    same = True
    for e, table in tables.items():
        got = table_rows(os.path.join(table, "fgrams"))
        equal = sorted(want) == sorted(got) and all(np.array_equal(want[k], got[k]) for k in want)
        print(f"--engine {e}: tables equal: {equal} ({sum(len(v) for v in want.values())} n-grams)")
        same = same and equal
    with open(os.path.join(HERE, "results.jsonl"), "a") as f:
        for x in rows:
            f.write(
                json.dumps(
                    {
                        "bench": "reference",
                        "machine": machine(),
                        "tokens": tokens,
                        "corpus": args.corpus,
                        "same": same,
                        **x,
                    }
                )
                + "\n"
            )
    shutil.rmtree(args.work, ignore_errors=True)
    if not same:
        sys.exit("the tables differ")


if __name__ == "__main__":
    main()
