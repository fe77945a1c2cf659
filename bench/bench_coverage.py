"""The coverage-vs-S curve from one table (`fgram coverage --sizes`) against one
`fgram coverage` run per size, each over a table built at that size, side by side,
alternated; then `fgram report` of the table with the curve.

    python bench/bench_coverage.py [--train GLOB] [--heldout PATH] [--size 1000000]
        [--sizes 1K,2K,5K,10K,20K,50K,100K,200K,500K,1M] [--rounds 2] [--engine spark]
        [--doc-sep 0] [--work DIR]

Defaults: the real English corpus of ../shared/corpora/english-dev, its Parquet parts
0-6 to build on and part 7 held out. The tables at each size are built once (not
timed) and checked to be the first S' rows of the table at S. Each round runs the one
command with --sizes and the separate commands, in alternating order, as a user runs
them (a process each); the numbers of the two must be equal. Records go to
bench/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import pyarrow.dataset as ds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine  # noqa: E402

CORPUS = os.path.join(HERE, "..", "..", "shared", "corpora", "english-dev", "parquet")


def fgram(*args: str) -> tuple[float, str]:
    exe = os.path.join(os.path.dirname(sys.executable), "fgram")
    t0 = time.time()
    out = subprocess.run([exe, "-q", *args], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"fgram {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return time.time() - t0, out.stdout


def rows(table: str):
    t = ds.dataset(os.path.join(table, "fgrams")).to_table().sort_by("fgram_id")
    return t.select(["fgram_id", "length", "tokens", "count"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--train", nargs="*", default=[f"{CORPUS}/part-0000{i}.parquet" for i in range(7)]
    )
    ap.add_argument("--heldout", default=f"{CORPUS}/part-00007.parquet")
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="1K,2K,5K,10K,20K,50K,100K,200K,500K,1M")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engine", default="spark")
    ap.add_argument("--doc-sep", default=None, help="flat shards' separator (uint16)")
    ap.add_argument("--work", default=os.path.join(HERE, "out", "coverage"))
    args = ap.parse_args()
    from fgram.pipeline.config.options import parse_counts as parse_sizes

    sizes = parse_sizes(args.sizes)
    engine = ["--engine", args.engine]
    if args.doc_sep is not None:
        engine += ["--doc-sep", args.doc_sep]
    tables = {}
    for s in sorted({args.size, *sizes}):
        tables[s] = os.path.join(args.work, f"t{s}")
        if not os.path.exists(os.path.join(tables[s], "index", "index.json")):
            read = [] if args.doc_sep is None else ["--doc-sep", args.doc_sep]
            secs, _ = fgram("build", tables[s], *args.train, "-S", str(s), "--overwrite", *read)
            fgram("index", tables[s], "--overwrite")
            print(f"built S={s} in {secs:.1f} s", flush=True)
    big = rows(tables[args.size])
    for s in sizes:  # a build at S' keeps exactly the first S' rows of the build at S
        assert rows(tables[s]).equals(big.slice(0, s)), f"the table at {s} is not a prefix"
    one_cmd = [
        "coverage",
        tables[args.size],
        args.heldout,
        "--sizes",
        args.sizes,
        "--json",
        *engine,
    ]
    results = []
    for r in range(args.rounds):
        order = ["one", "separate"] if r % 2 == 0 else ["separate", "one"]
        wall = {}
        for case in order:
            if case == "one":
                wall[case], out = fgram(*one_cmd)
                curve = json.loads(out)["by_size"]
            else:
                t0, separate = time.time(), []
                for s in sizes:
                    separate.append(json.loads(fgram("coverage", tables[s], args.heldout,
                                                     "--json", *engine)[1]))  # fmt: skip
                wall[case] = time.time() - t0
        for row, alone in zip(curve, separate, strict=True):
            assert {k: v for k, v in row.items() if k not in ("size", "fgrams")} == alone
        ratio = wall["one"] / wall["separate"]
        print(
            f"round {r + 1}: --sizes ({len(sizes)} sizes) {wall['one']:.1f} s, {len(sizes)} "
            f"separate runs {wall['separate']:.1f} s, ratio {ratio:.3f}",
            flush=True,
        )
        results.append({"round": r + 1, **wall, "ratio": ratio})
    secs, _ = fgram("report", tables[args.size], "-o", os.path.join(args.work, "report.html"),
                    "--heldout", args.heldout, *engine, "--overwrite")  # fmt: skip
    plain, _ = fgram("report", tables[args.size], "-o", os.path.join(args.work, "plain.html"),
                     "--overwrite")  # fmt: skip
    print(f"fgram report with the curve: {secs:.1f} s; without: {plain:.1f} s")
    print("curve:", [(c["size"], round(1 - c["share_unmatched"], 4), c["mean_match_length"])
                     for c in curve])  # fmt: skip
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        record = {"bench": "coverage", "machine": machine(), "engine": args.engine,
                  "size": args.size, "sizes": sizes, "rounds": results,
                  "report_seconds": secs, "report_plain_seconds": plain}  # fmt: skip
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
