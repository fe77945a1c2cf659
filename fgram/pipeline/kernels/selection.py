"""The selection maths of a build: a length's count histogram raises the threshold to
the S-th largest count seen so far, and the final histograms alone give the
cutoff count and how many f-grams each length contributes (ties at the cutoff:
whole lengths shortest first, the last one partly, by token ids)."""

from __future__ import annotations

import numpy as np


def add_length(
    hists: dict[int, dict[int, int]],
    k: int,
    part_hists: list[dict[int, int]],
    size: int | None,
    threshold: int,
) -> int:
    """Add length k's count histogram (from its key ranges) and raise the threshold to
    the S-th largest count seen so far (safe: the S f-grams count at least that, and an
    n-gram counts at most its parts); every length's
    histogram keeps only counts at or above it. Returns the threshold."""
    hists[k] = merge_hists(*part_hists)
    if size is not None:
        best = kth_largest(merge_hists(*hists.values()), size)
        if best is not None and best > threshold:
            threshold = best
    for length in hists:
        hists[length] = {c: n for c, n in hists[length].items() if c >= threshold}
    return threshold


def selection(
    hists: dict[int, dict[int, int]], size: int | None
) -> tuple[int, int, int, dict[int, int]]:
    """Cutoff count, last length taken at the cutoff, number selected and selected per length.

    From per-length count histograms alone: everything above the cutoff is in;
    at the cutoff, whole lengths are taken shortest first, and the last one
    taken (``cut_len``) only partly (by token ids, decided in the final sort).
    """
    combined = merge_hists(*hists.values())
    total = sum(combined.values())
    if size is None or total <= size:
        by_len = {k: sum(h.values()) for k, h in hists.items()}
        return (min(combined) if combined else 0), max(hists, default=0), total, by_len
    cutoff = kth_largest(combined, size)
    assert cutoff is not None  # total > size: the S-th largest count exists
    by_len = {k: sum(n for c, n in h.items() if c > cutoff) for k, h in hists.items()}
    need = size - sum(by_len.values())
    cut_len = 0
    for length in sorted(hists):
        if need <= 0:
            break
        take = min(need, hists[length].get(cutoff, 0))
        if take:
            cut_len = length
            by_len[length] += take
            need -= take
    return cutoff, cut_len, size, by_len


def histogram(counts: np.ndarray, floor: int) -> dict[int, int]:
    """{count value: number of keys} for counts >= floor (a small summary)."""
    c = counts[counts >= floor]
    vals, num = np.unique(c, return_counts=True)
    return {int(v): int(n) for v, n in zip(vals, num, strict=True)}


def kth_largest(hist: dict[int, int], k: int) -> int | None:
    """The k-th largest value of a histogram, or None if it holds fewer than k."""
    seen = 0
    for value in sorted(hist, reverse=True):
        seen += hist[value]
        if seen >= k:
            return value
    return None


def merge_hists(*hists: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in hists:
        for v, n in h.items():
            out[v] = out.get(v, 0) + n
    return out
