"""Engram's tables on a real corpus, side by side in one run: the build over canonical ids
(``--canonical``) against the plain build of the same shards, alternated; then the
collision audit of the canonical table at ten sizes against one build, and the audit's
finding for the configuration (the demo's by default: 129,280 x 5 buckets per order,
orders 2..3, 8 heads, layers 1 and 15).

    python bench/bench_engram_audit.py bench/out/debian/tokens [--rounds 2]
        [--config CONFIG.toml] [--out bench/out/engram-audit] [-K 3]

Both builds keep every n-gram of at least --min-count (default: fgram's), -K lengths.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import fgram
from fgram.engram import EngramConfig


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shards")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", default="bench/out/engram-audit")
    ap.add_argument("-K", "--max-len", type=int, default=3)
    ap.add_argument("--min-count", type=int, default=None)
    args = ap.parse_args()
    cfg = EngramConfig.load(args.config) if args.config else EngramConfig()
    os.makedirs(args.out, exist_ok=True)
    opts = {"max_len": args.max_len, "overwrite": True}
    if args.min_count is not None:
        opts["min_count"] = args.min_count
    plain, canon = [], []
    for r in range(args.rounds):  # alternated: plain, canonical, plain, ...
        t, _ = timed(lambda: fgram.build(f"{args.out}/plain", [args.shards], **opts))
        plain.append(t)
        t, m = timed(lambda: fgram.build(f"{args.out}/canonical", [args.shards], canonical=True,
                                         **opts))  # fmt: skip
        canon.append(t)
        print(f"round {r + 1}: plain {plain[-1]:.1f} s, canonical {canon[-1]:.1f} s")
    t_audit, rep = timed(lambda: fgram.engram_audit(f"{args.out}/canonical", cfg))
    with open(f"{args.out}/audit.json", "w") as fh:
        json.dump(rep, fh, indent=1)
    build = min(canon)
    ids = m["canonical"]
    print(f"{m['totals']['tokens']} tokens, {m['fgrams']} canonical n-grams "
          f"(canonical ids {ids['size']} of {ids['vocab_size']})")  # fmt: skip
    print(f"canonical / plain build: {' '.join(f'{c / p:.3f}' for c, p in zip(canon, plain))}")
    print(f"audit at {len(rep['sizes'])} sizes: {t_audit:.1f} s; / canonical build "
          f"{build:.1f} s: {t_audit / build:.3f}")  # fmt: skip
    for n, o in rep["orders"].items():
        shares = [h["collided_share"] for lay in rep["layers"].values() for h in lay[n]["heads"]]
        every = [lay[n]["all_heads"]["collided_share"] for lay in rep["layers"].values()]
        print(
            f"order {n}: {o['ngrams']} n-grams, coverage {o['coverage']:.4f}; collided share "
            f"heads {min(shares):.4%}..{max(shares):.4%}, every head {max(every):.5%}; "
            f"under 1% at {rep['under'][n]['0.01']}, under 0.1% at {rep['under'][n]['0.001']}"
        )
    for row in rep["sizes"]:
        print(f"  size {row['size']:>10}: " + "  ".join(
            f"order {n} {v['collided_share']:.4%} (every {v['all_heads_share']:.5%})"
            for n, v in row["orders"].items()))  # fmt: skip
    shutil.rmtree(f"{args.out}/plain", ignore_errors=True)


if __name__ == "__main__":
    main()
