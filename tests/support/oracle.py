"""Brute-force reference: a plain Counter over the same tokens."""

from __future__ import annotations

from collections import Counter

from fgram.pipeline.tables.coverage import coverage_table


def count_ngrams(docs: list[list[int]], max_len: int) -> Counter:
    counts: Counter = Counter()
    for doc in docs:
        for k in range(2, max_len + 1):
            for i in range(len(doc) - k + 1):
                counts[tuple(doc[i : i + k])] += 1
    return counts


def select(docs: list[list[int]], max_len: int, min_count: int, size: int | None):
    """[(tokens, count)] in fgram_id order: count desc, shorter first, token ids asc."""
    counts = count_ngrams(docs, max_len)
    ranked = sorted(
        ((g, c) for g, c in counts.items() if c >= min_count),
        key=lambda gc: (-gc[1], len(gc[0]), gc[0]),
    )
    return ranked if size is None else ranked[:size]


def split_flat(flat: list[int], sep: int | None) -> list[list[int]]:
    if sep is None:
        return [list(flat)]
    docs, cur = [], []
    for t in flat:
        if t == sep:
            docs.append(cur)
            cur = []
        else:
            cur.append(t)
    docs.append(cur)
    return docs


def oracle_match(fgrams: dict, tokens: list[int], doc_starts: list[int], max_len: int):
    starts = set(doc_starts) | {0}
    fid, mlen = [], []
    for i in range(len(tokens)):
        best = (-1, 1)
        for length in range(max_len, 1, -1):
            j = i - length + 1
            if j < 0 or any(s in starts for s in range(j + 1, i + 1)):
                continue
            g = tuple(tokens[j : i + 1])
            if g in fgrams:
                best = (fgrams[g], length)
                break
        fid.append(best[0])
        mlen.append(best[1])
    return fid, mlen


def oracle_coverage(ranked, size, docs, k) -> dict:
    """Coverage of ``docs`` by the first ``size`` rows of ``ranked`` (tokens, count),
    each position matched by brute force."""
    fgrams = {g: i for i, (g, _) in enumerate(ranked[:size])}
    hist = [0] * (k + 1)
    for doc in docs:
        for n in oracle_match(fgrams, doc, [0], k)[1]:
            hist[n] += 1
    return coverage_table(hist)
