"""Refresh (+1 shard of 20) against a full build of the 20 shards, on a real corpus.

    python bench/bench_refresh_real.py bench/out/debian/tokens \
        [--sizes 1000000,10000000] [--pairs 4] [--fraction 1.0] [--max-len 5]

The corpus: a folder of flat token shards (``fgram tokenize --format bin``, e.g. the
Debian sources of `bench/debian_corpus.py`), sorted by name. ``--fraction 0.5`` runs on
each shard's first half instead (cut at a document boundary, written once beside the
bench's outputs), to see how the ratio moves with the corpus's size.

For each S: a versioned root holding the first 19 shards is refreshed once (not
timed). Then, per pair, a copy of that root (hard links: a refresh only adds files
and renames) is refreshed with all 20 shards, and a full `fgram build` of the same 20
shards runs beside it, alternating which goes first; every refreshed table is checked
equal to the build's (`fgram diff`). Prints the walls, the ratios and where each
refresh's time went (its manifest), and appends them to bench/results.jsonl.
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

HERE = os.path.dirname(os.path.abspath(__file__))
FGRAM = [sys.executable, "-m", "fgram"]


def cut_shards(shards: list[str], fraction: float, folder: str, sep: int) -> list[str]:
    """Each shard's first ``fraction`` of tokens, ended at a document separator."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for path in shards:
        dest = os.path.join(folder, os.path.basename(path))
        if not os.path.exists(dest):
            t = np.memmap(path, dtype=np.uint16, mode="r")
            at = int(len(t) * fraction)
            ends = np.flatnonzero(t[at:] == sep)
            stop = at + int(ends[0]) + 1 if len(ends) else len(t)
            tmp = dest + ".tmp"
            np.asarray(t[:stop]).tofile(tmp)
            os.replace(tmp, dest)
        out.append(dest)
    return out


def run(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(FGRAM + args, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def breakdown(manifest: dict) -> dict:
    """Where a refresh's time went: per pass its stages and task seconds, the select."""
    return {
        "seconds": manifest["seconds"],
        "executor_start": manifest.get("executor_start_seconds"),
        "head_start_tasks": manifest.get("head_start_tasks"),
        "passes": {
            p["length"]: {
                "seconds": p["seconds"],
                **p.get("stages", {}),
                **{f"tasks_{k}": v for k, v in (p.get("task_seconds") or {}).items()},
                "ids_added": p.get("ids_added"),
                "scanned_units": p.get("scanned_units"),
                "scanned_grams": p.get("scanned_grams"),
            }
            for p in manifest["passes"]
        },
        "select": manifest["select"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="a folder of 20 flat uint16 token shards")
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "out", "refresh-real"))
    ap.add_argument("--extra", default="", help="more options for both commands")
    ap.add_argument("--engine", default="spark", help="fgram's --engine (default: spark)")
    args = ap.parse_args()
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        tm = json.load(f)
    sep = tm["doc_sep"]
    shards = sorted(glob.glob(os.path.join(args.corpus, "**", "*.bin"), recursive=True))
    if len(shards) < 2:
        sys.exit(f"{args.corpus}: fewer than 2 .bin shards")
    if args.fraction < 1:
        cut = os.path.join(args.out, f"shards-{args.fraction:g}")
        shards = cut_shards(shards, args.fraction, cut, sep)
    tokens = sum(os.path.getsize(s) // 2 for s in shards)
    common = ["--dtype", tm["dtype"], "--doc-sep", str(sep), "--max-len", str(args.max_len)]
    common += ["--engine", args.engine, *args.extra.split()]
    print(f"{len(shards)} shards, {tokens:,} tokens; the last one is the refresh's new shard")
    for size in [int(s) for s in args.sizes.split(",")]:
        opts = [*common, "--size", str(size)]
        tag = f"{args.fraction:g}-{size}"
        seed = os.path.join(args.out, f"seed-{tag}")
        if not os.path.exists(os.path.join(seed, "current")):
            shutil.rmtree(seed, ignore_errors=True)
            run(["refresh", seed, *shards[:-1], *opts, "--keep", "2"])
        rows = []
        for pair in range(args.pairs):
            root = os.path.join(args.out, "root")
            full = os.path.join(args.out, "full")
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(full, ignore_errors=True)
            subprocess.run(["cp", "-al", seed, root], check=True)
            refresh = ["refresh", root, *shards, *opts, "--keep", "2"]
            build = ["build", full, *shards, *opts]
            if pair % 2 == 0:
                t_refresh, t_build = run(refresh), run(build)
            else:
                t_build, t_refresh = run(build), run(refresh)
            subprocess.run(
                [*FGRAM, "diff", full, root, "--top", "0"], check=True, stdout=subprocess.PIPE
            )
            with open(os.path.join(root, "current", "manifest.json")) as f:
                m = json.load(f)
            row = {
                "bench": "refresh_real",
                "corpus": args.corpus,
                "fraction": args.fraction,
                "tokens": tokens,
                "size": size,
                "max_len": args.max_len,
                "pair": pair,
                "first": "refresh" if pair % 2 == 0 else "build",
                "refresh_s": round(t_refresh, 2),
                "build_s": round(t_build, 2),
                "ratio": round(t_refresh / t_build, 3),
                "refresh": breakdown(m),
                "extra": args.extra,
            }
            rows.append(row)
            print(
                f"S={size:,} pair {pair}: refresh {t_refresh:.1f} s, build {t_build:.1f} s, "
                f"ratio {t_refresh / t_build:.3f}  (tables equal)",
                flush=True,
            )
            print("   ", json.dumps(row["refresh"]), flush=True)
            with open(os.path.join(HERE, "results.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
        ratios = [r["ratio"] for r in rows]
        print(f"S={size:,}: ratio {min(ratios):.3f}-{max(ratios):.3f} over {len(rows)} pairs")


if __name__ == "__main__":
    main()
