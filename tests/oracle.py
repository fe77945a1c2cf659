"""Brute-force reference: a plain Counter over the same tokens."""

from __future__ import annotations

from collections import Counter


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
