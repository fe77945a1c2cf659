"""SCONE at a small scale, end to end, on a CPU: fgram's outputs train a GPT with f-gram
embeddings and serve it from the f-gram store; the same GPT without them (baseline), a
deeper GPT of about twice its inference FLOPs (baseline_x2) and the same GPT with an
Engram module of as many table values as SCONE's store (engram), and that Engram with
rows of their own for the frequent n-grams fgram counted (engram_counted), are trained
the same way. See README.md beside this file.

    python examples/scone_tiny/run.py                # the measured run (hours here)
    python examples/scone_tiny/run.py --smoke        # every arm on a tiny corpus, seconds
    python examples/scone_tiny/run.py --device cuda  # the same, on a GPU

Every step writes under --out and is skipped when its output is there (delete a step's
folder to redo it): data, tokenizer, shards, the choice of S, the table, tags, then per
model and seed a run folder, the embeddings, the evaluations and results.json. A finished
run (trained and evaluated) is also kept as one record in --records (for the measured
run, `results/` beside this file, committed): a run with a record is not trained again,
on this machine or another, and the results are made from the records.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from scone_data import (
    CORPUS,
    GRID,
    HERE,
    KINDS,
    engram_audit,
    fgram_arrays,
    log,
    make_data,
    make_tokenizer,
    run_fgram,
    windows,
)
from scone_eval import evaluate
from scone_results import config_of, keep_record, recorded, summarize
from scone_train import counted_setup, engram_setup, train

# a run's training time against the baseline's (measured on 2 cores): the longest start
# first, so that runs side by side end together
COST = {"baseline": 1.0, "engram": 1.2, "engram_counted": 1.25, "baseline_x2": 1.9, "scone": 2.0}


def side_by_side(args, todo: list[tuple[str, int]], jobs: int, records: str) -> None:
    """Train the runs without a record in ``jobs`` processes at a time (this script again,
    one arm and seed each, --threads cores / jobs unless given), the longest first; each
    writes its log to runs/ARM-seedN.log and its record as a run alone would. A failed
    run stops the others' successors, and the script, naming its log."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // jobs)
    queue = sorted(todo, key=lambda ks: (-COST[ks[0]], ks[1]))
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    log(f"{len(queue)} runs, {jobs} side by side with {threads} threads each")
    t0, running, failed = time.time(), {}, []
    try:
        while queue or running:
            while queue and len(running) < jobs and not failed:
                kind, seed = queue.pop(0)
                path = os.path.join(args.out, "runs", f"{kind}-seed{seed}.log")
                cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                       "--kinds", kind, "--seeds", str(seed), "--jobs", "1",
                       "--threads", str(threads), "--records", records, "--lane"]  # fmt: skip
                with open(path, "a") as f:
                    running[subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)] = path
                log(f"{kind} seed {seed}: started, its log {path}")
            if not running:
                break
            proc, path = _first_done(running)
            del running[proc]
            if proc.returncode:
                failed.append(path)
            log(f"{os.path.basename(path)[:-4]}: " + ("failed" if proc.returncode else "done"))
    finally:
        for proc in running:
            proc.terminate()
    if failed:
        with open(failed[0]) as f:
            tail = f.read()[-2000:]
        raise SystemExit(f"{', '.join(failed)}: the run failed; its log ends:\n{tail}")
    log(f"{len(todo)} runs side by side in {time.time() - t0:.0f} s")


def _first_done(running: dict):
    while True:
        for proc, path in running.items():
            if proc.poll() is not None:
                return proc, path
        time.sleep(1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--smoke", action="store_true", help="a tiny generated corpus, seconds")
    ap.add_argument(
        "--corpus", default=CORPUS, help="english-dev (tokens.bin; its tokenizer beside)"
    )
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument(
        "--records", default=None, help="a folder of finished runs' records (default: "
        "results/ beside this file for the measured run, else results/ under --out)",
    )  # fmt: skip
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the arms, of " + ", ".join(KINDS))
    ap.add_argument("--engram-heads", type=int, default=4, help="Engram's heads per order")
    ap.add_argument(
        "--engram-memory", type=float, default=1.0, help="the Engram arms' tables: their "
        "values as a share of SCONE's store's (1: as many)",
    )  # fmt: skip
    ap.add_argument("--device", default="cpu", help="cpu, or cuda where a GPU is at hand")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-len", type=int, default=4, help="K")
    ap.add_argument("--size", type=int, default=None, help="S (default: chosen by the rule)")
    ap.add_argument("--grid", default=GRID, help="the sizes S the choice looks at")
    ap.add_argument(
        "--min-gain",
        type=float,
        default=1.0,
        help="points of matched dev positions per doubling of S, the rule's floor",
    )
    ap.add_argument("--layers", type=int, default=4, help="the baseline's blocks")
    ap.add_argument("--dim", type=int, default=256, help="the models' width d")
    ap.add_argument("--heads", type=int, default=4, help="attention heads")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument(
        "--checkpoint-every", type=int, default=200, help="steps between a run's checkpoints"
    )
    ap.add_argument("--probe", type=int, default=64, help="validation windows of the curve")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: every core, "
                    "or cores / --jobs side by side)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=0, help="runs trained side by side, each its "
                    "own process (0: one a core on a CPU, one on a GPU)")  # fmt: skip
    ap.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)  # one run of many
    ap.add_argument("--prepare-only", action="store_true", help="stop once the tags are made")
    ap.add_argument(
        "--stop-at", type=int, default=None, help="end the run after its checkpoint at this "
        "step, as a kill would (to try resuming)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.smoke:
        args.out = (
            args.out if args.out != os.path.join(HERE, "out") else os.path.join(HERE, "out-smoke")
        )
        args.vocab, args.max_len, args.seq_len, args.batch = 400, 3, 32, 8
        args.steps, args.eval_every, args.checkpoint_every, args.probe = 12, 4, 4, 8
        args.grid, args.samples, args.new_tokens = "10,20,50,100,200,500,1K", 1, 8
    import torch
    from tokenizers import Tokenizer

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    out = args.out
    os.makedirs(out, exist_ok=True)
    make_data(args, out)
    tok_path = make_tokenizer(args, out)
    fg_info = run_fgram(args, out, tok_path)
    if args.prepare_only:
        return
    parts = [windows(fg_info["tags"][name], args.seq_len) for name in ("train", "dev")]
    data = {
        "train": (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])),
        "val": windows(fg_info["tags"]["val"], args.seq_len),
        "fgrams": fgram_arrays(fg_info["table"], args.max_len),
        "vocab": Tokenizer.from_file(tok_path).get_vocab_size(),
    }
    log(
        f"windows: train {len(data['train'][0])}, val {len(data['val'][0])} of "
        f"{args.seq_len + 1} tokens; {len(data['fgrams'][1])} f-grams"
    )
    tok = Tokenizer.from_file(tok_path)
    kinds = args.kinds.split(",")
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"--kinds: {', '.join(sorted(unknown))}: not one of {', '.join(KINDS)}")
    engram = counted = None
    if {"engram", "engram_counted"} & set(kinds):
        engram = engram_setup(args, tok_path, len(data["fgrams"][1]))
    if "engram_counted" in kinds:
        counted = counted_setup(args, out, engram)
    setups = {"engram": engram, "engram_counted": counted}
    measured = out == os.path.join(HERE, "out") and not args.smoke
    records = args.records or os.path.join(HERE if measured else out, "results")
    config = config_of(args, fg_info["size"])
    seeds = [int(s) for s in args.seeds.split(",")]
    todo = [(k, s) for s in seeds for k in kinds if recorded(records, config, k, s) is None]
    jobs = min(args.jobs or (os.cpu_count() or 1 if args.device == "cpu" else 1), len(todo))
    if jobs > 1:
        side_by_side(args, todo, jobs, records)
    runs = []
    for seed in seeds:
        for kind in kinds:
            rec = recorded(records, config, kind, seed)
            if rec is None:
                folder = os.path.join(out, "runs", f"{kind}-seed{seed}")
                setup = setups.get(kind)
                rec = train(args, kind, seed, data, data["fgrams"], folder, setup)
                rec["eval"] = evaluate(args, out, fg_info, data, rec, folder, tok, setup)
                keep_record(records, config, rec)
            else:
                log(f"{kind} seed {seed}: from its record in {records}")
            runs.append(rec)
    if args.lane:
        return
    audit = engram_audit(args, out, engram["config"]) if engram else None
    res = summarize(args, out, fg_info, data, runs, engram, audit, counted)
    for kind, row in res["models"].items():
        log(
            f"{kind}: validation perplexity {row['ppl_mean']:.2f} (min {row['ppl_min']:.2f}, "
            f"max {row['ppl_max']:.2f})"
            + (f", from the store {np.mean(row['store_ppl']):.2f}" if "store_ppl" in row else "")
        )
    for line in res["verdict"]:
        log(line)
    log(f"results: {os.path.join(out, 'results.json')}")


if __name__ == "__main__":
    main()
