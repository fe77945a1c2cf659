"""Benchmark `fgram build` end to end: wall time, tokens/s (total and per core), peak memory.

Peak memory is the largest sum of resident memory over the whole process tree
(the CLI's Python, the Spark JVM and its Python workers), sampled every 0.1 s.

    python bench/bench_build.py --generate 100000000 --size 10000000
    python bench/bench_build.py --corpus ../shared/corpora/english-dev/tokens.bin --doc-sep 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += p.memory_info().rss
    return total


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    )


def run(cmd: list[str]) -> tuple[float, int, int]:
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(ps))
        time.sleep(0.1)
    out = proc.stdout.read()
    if proc.returncode:
        print(out[-3000:], file=sys.stderr)
    return time.time() - t0, peak, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpus", help="existing input (file, folder or glob)")
    ap.add_argument("--generate", type=int, help="generate a synthetic corpus of this many tokens")
    ap.add_argument("--vocab", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--max-len", type=int, default=5)
    ap.add_argument("--doc-sep", type=int, default=None)
    ap.add_argument("--dtype", default="uint16")
    ap.add_argument("--work", default=os.path.join(HERE, "out"))
    ap.add_argument("--record", default=os.path.join(HERE, "results.jsonl"))
    ap.add_argument("--extra", nargs="*", default=[], help="extra fgram build arguments")
    ap.add_argument("--tag", default="", help="a label stored with the record")
    ap.add_argument("--engine", default="spark", help="fgram's --engine (default: spark)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    corpus = args.corpus
    if args.generate:
        corpus = os.path.join(args.work, f"synth-{args.generate}-{args.vocab}")
        if not os.path.exists(os.path.join(corpus, "meta.json")):
            from fgram.pipeline.formats.synth import generate

            generate(corpus, args.generate, vocab=args.vocab, fmt="bin")
        args.doc_sep = 0
    out = os.path.join(args.work, "build-out")
    shutil.rmtree(out, ignore_errors=True)
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    cmd = [
        fgram,
        "build",
        out,
        corpus,
        "--max-len",
        str(args.max_len),
        "--dtype",
        args.dtype,
        "--engine",
        args.engine,
        *args.extra,
    ]
    if args.size:
        cmd += ["--size", str(args.size)]
    if args.doc_sep is not None:
        cmd += ["--doc-sep", str(args.doc_sep)]
    wall, peak, rc = run(cmd)
    if rc:
        sys.exit(rc)
    with open(os.path.join(out, "manifest.json")) as fh:
        m = json.load(fh)
    cores = os.cpu_count()
    tokens = m["totals"]["tokens"]
    rec = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "tag": args.tag,
        "machine": machine(),
        "command": " ".join(os.path.relpath(c) if os.path.exists(c) else c for c in cmd),
        "tokens": tokens,
        "fgrams": m["fgrams"],
        "cutoff": m["cutoff_count"],
        "wall_s": round(wall, 1),
        "tokens_per_s": round(tokens / wall),
        "tokens_per_s_per_core": round(tokens / wall / cores),
        "peak_rss_gib": round(peak / 2**30, 2),
        "passes_s": {p["length"]: p["seconds"] for p in m["passes"]},
        "thresholds": {p["length"]: p["threshold"] for p in m["passes"]},
        "stages": {p["length"]: p["stages"] for p in m["passes"]},
        "select_s": m["select"]["seconds"],
    }
    with open(args.record, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(json.dumps(rec, indent=2))


if __name__ == "__main__":
    main()
