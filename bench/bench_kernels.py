"""Side-by-side kernel timings on one unit of real-looking tokens (ratios, interleaved runs).

    python bench/bench_kernels.py [--tokens 16000000] [--corpus FILE.bin]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from fgram.pipeline import kernels as kn


class Directory:
    """Exact lookup of uint64 keys in a sorted table of uniformly spread keys.

    A bucket directory on the top bits gives each query a start offset that is
    on average less than one slot from its key, so a lookup costs a couple of
    random reads instead of a binary search's ~log2(n) cache misses.
    """

    def __init__(self, table: np.ndarray):
        self.table = np.ascontiguousarray(table, dtype=np.uint64)
        n = len(self.table)
        self.bits = int(min(max(1, int(np.ceil(np.log2(max(n, 2))))), 30))
        self.shift = np.uint64(64 - self.bits)
        buckets = (self.table >> self.shift).astype(np.int64)
        self.start = np.searchsorted(buckets, np.arange((1 << self.bits) + 1)).astype(np.int64)

    def find(self, queries: np.ndarray) -> np.ndarray:
        """Index of each query in the table, or -1 where absent (int64)."""
        q = np.asarray(queries, dtype=np.uint64)
        out = np.full(len(q), -1, dtype=np.int64)
        n = len(self.table)
        if n == 0 or len(q) == 0:
            return out
        h = (q >> self.shift).astype(np.intp)
        lo = self.start[h]
        end = self.start[h + 1]
        active = np.flatnonzero(lo < end)
        lo = lo[active]
        end = end[active]
        while len(active):
            cand = self.table[lo]
            qa = q[active]
            hit = cand == qa
            out[active[hit]] = lo[hit]
            more = (~hit) & (cand < qa) & (lo + 1 < end)
            active = active[more]
            lo = lo[more] + 1
            end = end[more]
        return out


def directory_inverse(keys, n_own):
    uniq, counts = kn.count_keys(keys[:n_own])
    return uniq, counts, Directory(uniq).find(keys)


def pandas_hash_inverse(keys, n_own):
    import pandas as pd
    uniq, counts = kn.count_keys(keys[:n_own])
    return uniq, counts, pd.Index(uniq, copy=False).get_indexer(keys)


def _numba_variant():
    """A compiled open-addressing hash count (only if numba is installed; not a dependency)."""
    try:
        import numba
    except ImportError:
        return None

    def hash_count_inverse(keys, bits):
        size = 1 << bits
        EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
        tk = np.full(size, EMPTY, np.uint64)
        tid = np.empty(size, np.int64)
        uniq = np.empty(len(keys), np.uint64)
        counts = np.zeros(len(keys), np.int64)
        inv = np.empty(len(keys), np.uint32)
        shift = np.uint64(64 - bits)
        mask = size - 1
        n = 0
        for i in range(len(keys)):
            k = keys[i]
            s = np.int64(k >> shift)
            while True:
                t = tk[s]
                if t == k:
                    j = tid[s]
                    break
                if t == EMPTY:
                    tk[s] = k; tid[s] = n; uniq[n] = k; j = n; n += 1
                    break
                s = (s + 1) & mask
            counts[j] += 1
            inv[i] = j
        return uniq[:n], counts[:n], inv


    kernel = numba.njit(hash_count_inverse)

    def run(keys, n_own):
        uniq, counts, inv = kernel(keys, max(4, int(np.ceil(np.log2(len(keys) * 2)))))
        order = np.argsort(uniq)
        rank = np.empty(len(order), np.uint32)
        rank[order] = np.arange(len(order), dtype=np.uint32)
        return uniq[order], counts[order], rank[inv]
    run(np.arange(1, 100, dtype=np.uint64), 99)   # compile outside the timing
    return run


def unique_inverse(keys, n_own):
    uniq, inv = np.unique(keys, return_inverse=True)
    return uniq, None, inv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16_000_000)
    ap.add_argument("--corpus", default=None, help="uint16 .bin with separator 0 (default: synthetic)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.corpus:
        raw = np.fromfile(args.corpus, dtype=np.uint16, count=args.tokens)
    else:
        from fgram.pipeline.synth import PhraseBook
        raw = PhraseBook(50_000, 0).sample(np.random.default_rng(1), args.tokens).astype(np.uint16)
    tok = raw.astype(np.uint32)
    tok[raw == 0] = kn.SENTINEL
    pos, keys = kn.ngram_keys(tok, tok, 2)
    variants = {"sort_count_inverse (packed sort)": kn.sort_count_inverse,
                "sort + Directory.find": directory_inverse,
                "sort + pandas Index.get_indexer": pandas_hash_inverse,
                "np.unique(return_inverse)": unique_inverse}
    compiled = _numba_variant()
    if compiled is not None:
        variants["numba hash count + sort of the distinct keys"] = compiled
    times = {name: [] for name in variants}
    ref = None
    for _ in range(args.repeat):
        for name, fn in variants.items():
            t = time.perf_counter()
            u, _, inv = fn(keys, len(keys))
            times[name].append(time.perf_counter() - t)
            if ref is None:
                ref = u[inv]
            assert np.array_equal(u[inv], ref)
    base = min(times["sort_count_inverse (packed sort)"])
    print(f"{len(keys)} bigram keys, {len(np.unique(keys))} distinct; best of {args.repeat}")
    for name, ts in times.items():
        print(f"  {name:46s} {min(ts):7.3f} s  {min(ts) / base:5.2f}x")


if __name__ == "__main__":
    main()
