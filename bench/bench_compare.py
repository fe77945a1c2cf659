"""One run, side by side on the same corpus: fgram on Spark, the same tasks without
Spark (--engine local), and a plain DuckDB query; checks all three tables agree.

    python bench/bench_compare.py out/synth-100000000-50000 --size 10000000 [--no-duckdb]

The compiled kernels are warmed (compiled into numba's on-disk cache) before
the timed runs. Prints a markdown table (wall, tokens/s, tokens/s per core, peak RSS, ratio to
the local engine) and appends the records to bench/results.jsonl.
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

import pyarrow.dataset as ds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import HERE, machine, run  # noqa: E402


def table_rows(path: str):
    t = ds.dataset(path, format="parquet").to_table(columns=["fgram_id", "tokens", "count"])
    return t.sort_by("fgram_id")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a uint16 .bin file with separator 0, or a folder of them")
    ap.add_argument("--size", type=int, default=10_000_000)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--no-duckdb", action="store_true")
    ap.add_argument("--work", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    bin_dir = os.path.dirname(sys.executable)
    fgram = os.path.join(bin_dir, "fgram")
    results = {}
    # compile the numba kernels once (cached on disk) so neither timed run pays it
    subprocess.run(
        [sys.executable, "-c", "from fgram.pipeline.kernels.warmup import warm_up; warm_up()"],
        check=True,
    )
    for engine in ("spark", "local"):
        out = os.path.join(args.work, f"cmp-{engine}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [
            fgram,
            "build",
            out,
            args.corpus,
            "--dtype",
            "uint16",
            "--doc-sep",
            "0",
            "--size",
            str(args.size),
            "--max-len",
            str(args.max_len),
            "--engine",
            engine,
        ]
        wall, peak, rc = run(cmd)
        if rc:
            sys.exit(rc)
        with open(os.path.join(out, "manifest.json")) as fh:
            m = json.load(fh)
        results[engine] = {
            "wall": wall,
            "peak": peak,
            "cmd": " ".join(cmd[1:]),
            "manifest": m,
            "table": os.path.join(out, "fgrams"),
        }
    tokens = results["spark"]["manifest"]["totals"]["tokens"]
    a, b = table_rows(results["spark"]["table"]), table_rows(results["local"]["table"])
    assert a.equals(b), "spark and local tables differ"
    if not args.no_duckdb:
        files = (
            [args.corpus]
            if os.path.isfile(args.corpus)
            else sorted(glob.glob(os.path.join(args.corpus, "*.bin")))
        )
        assert len(files) == 1, "the DuckDB query reads one .bin file"
        out = os.path.join(args.work, "cmp-duckdb.parquet")
        cmd = [
            sys.executable,
            os.path.join(HERE, "duckdb_ngrams.py"),
            files[0],
            out,
            "--size",
            str(args.size),
            "--max-len",
            str(args.max_len),
        ]
        wall, peak, rc = run(cmd)
        if rc == 0:
            d = table_rows(out)
            same = (
                d.column("tokens").to_pylist() == a.column("tokens").to_pylist()
                and d.column("count").to_pylist() == a.column("count").to_pylist()
            )
            results["duckdb"] = {"wall": wall, "peak": peak, "cmd": " ".join(cmd[1:]), "same": same}
        else:
            results["duckdb"] = {"wall": wall, "peak": peak, "cmd": " ".join(cmd[1:]), "failed": rc}
    cores = os.cpu_count()
    base = results["local"]["wall"]
    print(f"\n{tokens} tokens, S={args.size}, K={args.max_len}; {machine()}\n")
    print("| run | wall | tokens/s | per core | peak RSS | ratio to local |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        note = ""
        if name == "duckdb":
            note = " (failed)" if "failed" in r else ("" if r["same"] else " (DIFFERENT table)")
        print(
            f"| {name}{note} | {r['wall']:.1f} s | {tokens / r['wall'] / 1e6:.2f}M | "
            f"{tokens / r['wall'] / cores / 1e6:.2f}M | {r['peak'] / 2**30:.2f} GiB | "
            f"{r['wall'] / base:.2f}x |"
        )
    for name in ("spark", "local"):
        m = results[name]["manifest"]
        print(
            f"{name}: passes "
            + ", ".join(
                f"{p['length']}: {p['seconds']:.1f}s (thr {p['threshold']}, kept {p['kept']})"
                for p in m["passes"]
            )
            + f"; select {m['select']['seconds']:.1f}s; fgrams {m['fgrams']}, "
            f"cutoff {m['cutoff_count']}"
        )
    with open(os.path.join(HERE, "results.jsonl"), "a") as fh:
        for name, r in results.items():
            fh.write(
                json.dumps(
                    {
                        "when": time.strftime("%Y-%m-%d %H:%M"),
                        "run": name,
                        "machine": machine(),
                        "command": r["cmd"],
                        "tokens": tokens,
                        "wall_s": round(r["wall"], 1),
                        "peak_rss_gib": round(r["peak"] / 2**30, 2),
                    }
                )
                + "\n"
            )


if __name__ == "__main__":
    main()
