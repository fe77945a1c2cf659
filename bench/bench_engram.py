"""Engram's hash ids: fgram's compiled kernel (`fgram.engram.EngramHashing.hash`) against a
numpy implementation written as the demo computes them (a shifted copy per order, a
product and XOR per token back, a modulo per head: numpy temporaries), on the same
windows, side by side in one run; the ids compared equal.

    python bench/bench_engram.py [--tokens 2000000] [--seq 4096] [--batch 1]
        [--rounds 3] [--vocab 50280] [--config CONFIG.toml]

The configuration is the demo's default (129280 x 5 buckets per order, orders 2..3,
8 heads, layers 1 and 15) unless --config names another; token ids are drawn uniformly
from the vocabulary and canonical ids by a random many-to-one map (the kernel's cost does
not depend on them). Both hash ``--batch`` windows of ``--seq`` tokens a call, in turn
(1: as `fgram.torch.FgramDataset` hashes each window). Tokens/s are per core (one thread
each).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fgram.engram import EngramConfig, EngramHashing, multipliers, table_sizes


def numpy_hash(cfg: EngramConfig, lookup: np.ndarray, size: int, ids: np.ndarray) -> dict:
    x = np.where(ids >= 0, lookup[np.maximum(ids, 0)], ids).astype(np.int64)
    pad = int(lookup[cfg.pad_id])
    mult, sizes = multipliers(cfg, size), table_sizes(cfg)
    b, t = x.shape
    out = {}
    for layer in cfg.layer_ids:
        shifted = [np.pad(x, ((0, 0), (k, 0)), constant_values=pad)[:, :t]
                   for k in range(cfg.max_ngram_size)]  # fmt: skip
        cols = []
        for n in range(2, cfg.max_ngram_size + 1):
            mix = shifted[0] * mult[layer][0]
            for k in range(1, n):
                mix = np.bitwise_xor(mix, shifted[k] * mult[layer][k])
            cols += [mix % p for p in sizes[layer][n - 2]]
        out[layer] = np.stack(cols, axis=2)
    return out


def each(fn, batches: list) -> None:
    """A loader's use: each batch's ids made, then handed on (not all held at once)."""
    for b in batches:
        fn(b)


def best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=50280)
    ap.add_argument("--config", default=None)
    args = ap.parse_args()
    cfg = EngramConfig.load(args.config) if args.config else EngramConfig()
    rng = np.random.default_rng(0)
    lookup = rng.integers(0, args.vocab * 2 // 3, args.vocab).astype(np.int64)
    size = int(lookup.max()) + 1
    ids = rng.integers(0, args.vocab, (args.tokens // args.seq, args.seq)).astype(np.int32)
    hashing = EngramHashing(cfg, lookup=(lookup, size))
    ours = hashing.hash(ids)  # compiled (or loaded) before timing
    theirs = numpy_hash(cfg, lookup, size, ids)
    assert all(np.array_equal(ours[k], theirs[k]) for k in theirs), "ids differ"
    n = ids.size
    batches = [ids[i : i + args.batch] for i in range(0, len(ids), args.batch)]
    t_ours = best(lambda: each(hashing.hash, batches), args.rounds)
    t_numpy = best(lambda: each(lambda b: numpy_hash(cfg, lookup, size, b), batches), args.rounds)
    print(f"{n} tokens in batches of {args.batch} x {args.seq}, {len(cfg.layer_ids)} layers x "
          f"{cfg.max_ngram_size - 1} orders x {cfg.n_head_per_ngram} heads; ids equal")  # fmt: skip
    print(f"  fgram kernel {t_ours:.3f} s  {n / t_ours / 1e6:.2f}M tokens/s")
    print(f"  numpy        {t_numpy:.3f} s  {n / t_numpy / 1e6:.2f}M tokens/s")
    print(f"  ratio (fgram / numpy time): {t_ours / t_numpy:.3f}")


if __name__ == "__main__":
    main()
