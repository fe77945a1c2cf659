"""Side by side: counting one unit of work with the compiled kernels (exact one-word sort on
narrow keys, and the indirect path that wide keys take) vs the first numpy version.

    python bench/bench_kernels.py [--tokens 16000000] [--corpus FILE.bin] [--repeat 3]

Times `unit_table` (radix buckets + numba, what the build runs) with the
narrowest `KeyCode` (key bits + position in one uint64: one exact sort), with
64-bit keys (`WIDE`: sort of (top bits, index) pairs, full keys checked) and,
interleaved in the same run, the numpy implementation both replaced (pieces of
2**20 positions, a packed sort of top key bits + index, pieces merged by
searchsorted, a dense per-position index as output), kept below as the
baseline. The compiled one returns each key's positions instead of a dense
index; the time to turn that into per-position ids (`ids_at`, done by the
next pass) is included in its column. Three cases on one unit: pass 2
(every position a candidate), pass 3 with ~60% of the bigrams frequent, and
the same as a last pass (counts only). Checks that both give the same table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fgram.pipeline.kernels.counting import ids_at, unit_table
from fgram.pipeline.kernels.keys import INVALID, SENTINEL, WIDE, KeyCode, ngram_keys
from fgram.pipeline.kernels.scratch import Scratch

_U32 = np.uint64(32)
_LO32 = np.uint64(0xFFFFFFFF)


def run_lengths(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a sorted array and how often each occurs."""
    n = len(sorted_keys)
    if n == 0:
        return sorted_keys[:0].copy(), np.zeros(0, np.int64)
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=starts[1:])
    idx = np.flatnonzero(starts)
    counts = np.diff(np.append(idx, n))
    return sorted_keys[idx], counts.astype(np.int64)


def sort_count_inverse(keys: np.ndarray, n_own: int):
    """Distinct keys, counts of the first n_own, each key's index (packed top-32 + index sort)."""
    n = len(keys)
    if n == 0:
        return keys[:0].copy(), np.zeros(0, np.int64), np.zeros(0, np.uint32)
    packed = keys >> _U32
    packed <<= _U32
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    np.bitwise_and(packed, _LO32, out=packed)
    order = packed.view(np.int64)
    full = keys[order]
    bad = np.flatnonzero(full[1:] < full[:-1])
    if len(bad):
        hi = full >> _U32
        vals = np.unique(hi[bad])
        lo, up = np.searchsorted(hi, vals, "left"), np.searchsorted(hi, vals, "right")
        lens = up - lo
        idx = np.repeat(lo - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
            int(lens.sum())
        )
        sub = np.lexsort((full[idx], hi[idx]))
        order[idx] = order[idx][sub]
        full[idx] = full[idx][sub]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(full[1:], full[:-1], out=starts[1:])
    first = np.flatnonzero(starts)
    run = np.cumsum(starts, dtype=np.uint32)
    run -= np.uint32(1)
    inverse = np.empty(n, dtype=np.uint32)
    inverse[order] = run
    counts = np.diff(np.append(first, n))
    if n_own < n:
        np.subtract.at(counts, inverse[n_own:].astype(np.intp), 1)
    return full[first], counts, inverse


def numpy_unit_table(prev, tokens, k, limit, want_inverse, chunk=1 << 20):
    """The numpy unit_table the compiled kernels replaced (same contract)."""
    n_pos = max(len(tokens) - k + 1, 0)
    pieces, counted = [], 0
    step = chunk if want_inverse else max(n_pos, 1)
    for s in range(0, n_pos, step):
        e = min(s + step, n_pos)
        pos, keys = ngram_keys(prev[s : e + 1], tokens[s : e + k - 1], k)
        n_own = int(np.searchsorted(pos, limit - s))
        counted += n_own
        if want_inverse:
            pieces.append((s, pos) + sort_count_inverse(keys, n_own))
        else:
            uniq, counts = run_lengths(np.sort(keys[:n_own]))
            extra = keys[n_own:]
            extra = np.setdiff1d(extra, uniq) if len(extra) else extra
            if len(extra):
                table = np.union1d(uniq, extra)
                full = np.zeros(len(table), dtype=np.int64)
                full[np.searchsorted(table, uniq)] = counts
                uniq, counts = table, full
            return uniq, counts, None, counted
    uniq, _ = run_lengths(np.sort(np.concatenate([p[2] for p in pieces])))
    counts = np.zeros(len(uniq), dtype=np.int64)
    dense = np.full(n_pos, len(uniq), dtype=np.uint32) if want_inverse else None
    for s, pos, u, c, inv in pieces:
        where = np.searchsorted(uniq, u)
        counts[where] += c
        if want_inverse:
            dense[pos + s] = where.astype(np.uint32)[inv]
    return uniq, counts, dense, counted


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16_000_000)
    ap.add_argument(
        "--corpus", default=None, help="uint16 .bin with separator 0 (default: synthetic)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.corpus:
        raw = np.fromfile(args.corpus, dtype=np.uint16, count=args.tokens)
    else:
        from fgram.pipeline.formats.synth import PhraseBook

        raw = PhraseBook(50_000, 0).sample(np.random.default_rng(1), args.tokens).astype(np.uint16)
    tok = raw.astype(np.uint32)
    tok[raw == 0] = SENTINEL
    limit = len(tok) - 100  # a flat range's overlap: looked up, not counted
    scratch = Scratch()  # what a build's worker does: work arrays reused unit after unit
    unit_table(tok[:1000], tok[:1000], 2, 900, True)  # compile outside the timing
    u2, _, order, _ = unit_table(tok, tok, 2, limit, True)
    frequent = np.random.default_rng(2).random(len(u2)) < 0.6
    ids = ids_at(np.where(frequent, np.arange(len(u2)), INVALID), order, len(tok))
    cases = {
        "pass 2 (all positions)": (tok, 2, True, KeyCode(16, 16)),
        "pass 3 (60% of bigrams frequent)": (ids, 3, True, KeyCode.fitting(len(u2), 65535)),
        "pass 3 as the last pass (no inverse)": (ids, 3, False, KeyCode.fitting(len(u2), 65535)),
    }
    print(f"{len(tok)} tokens; best of {args.repeat}, implementations interleaved")
    for case, (prev, k, inv, code) in cases.items():
        impls = {
            "exact": lambda *a, c=code: unit_table(*a, code=c, scratch=scratch),
            "indirect": lambda *a: unit_table(*a, code=WIDE, exact=False),
            "numpy": numpy_unit_table,
        }
        codes = {"exact": code, "indirect": WIDE, "numpy": WIDE}
        best = {name: np.inf for name in impls}
        tables = {}
        for _ in range(args.repeat):
            for name, fn in impls.items():
                t = time.perf_counter()
                out = fn(prev, tok, k, limit, inv)
                if inv and name != "numpy":
                    ids_at(np.zeros(len(out[0]), np.uint32), out[2], len(tok))
                best[name] = min(best[name], time.perf_counter() - t)
                # the same table, whatever the code: (prefix, last) -> count
                p_, l_ = codes[name].decode(out[0])
                o = np.lexsort((l_, p_))
                tables[name] = (p_[o], l_[o], np.asarray(out[1])[o].astype(np.int64), out[3])
        ref = tables["numpy"]
        for name, t in tables.items():
            assert all(np.array_equal(a, b) for a, b in zip(t[:3], ref[:3])) and t[3] == ref[3], (
                name
            )
        per = {name: best[name] * 1e9 / len(tok) for name in impls}
        print(
            f"  {case:38s} exact {per['exact']:5.1f}, indirect {per['indirect']:5.1f}, "
            f"numpy {per['numpy']:5.1f} ns/position: exact is "
            f"{per['indirect'] / per['exact']:.2f}x indirect, "
            f"{per['numpy'] / per['exact']:.2f}x numpy"
        )


if __name__ == "__main__":
    main()
