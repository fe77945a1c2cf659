"""Coverage: how much of a corpus a table matches, for the table and for every smaller S.

A position's match is the longest f-gram ending there (`index.FgramIndex.match`);
coverage counts positions by that length (1: unmatched; separators apart).

Coverage against S' <= S from one table. The table's order (count desc, then shorter
first, then tokens) ranks every prefix and suffix of an f-gram before it, so its first
S' rows are exactly the table a build with ``--size S'`` selects, closed under prefixes
and suffixes too. The f-grams ending at a position are the suffixes of its longest
match, of lengths 2..L, and their ids grow with their length. So under the first S'
rows the match at that position is its longest suffix whose id is below S', and the
positions matched at length >= l under S' are those whose length-l suffix has an id
below S'. One walk down each position's suffix links (`size_buckets`), counting the
ids by the interval of the grid they fall in, answers every S' of the grid at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fgram.pipeline.config.options import human
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.kernels.jit import Array, I64s, U8s, compiled


def check_sizes(sizes: Sequence[int], rows: int, built_size: int | None, where: str) -> None:
    """Sizes a table of ``rows`` f-grams answers: any S' <= rows, and any larger one when
    the build kept every n-gram it could (no ``--size``, or fewer rows than it): then a
    build at S' keeps the same rows."""
    if not sizes:
        raise ConfigError("--sizes: give at least one size")
    complete = built_size is None or rows < built_size
    too_big = [s for s in sizes if s > rows]
    if too_big and not complete:
        raise ConfigError(
            f"--sizes {human(too_big[0])}: {where} holds the top {rows} f-grams "
            f"(built with --size {built_size}); a larger S needs a build at that size"
        )


def default_sizes(rows: int) -> list[int]:
    """A grid for the coverage-vs-S curve: 1, 2, 5 x 10^k from about rows / 10^4 (at
    least 10) below ``rows``, then ``rows``."""
    if rows < 1:
        return [1]
    low = max(10, 10 ** (len(str(rows)) - 5))
    grid = [m * low * 10**e for e in range(13) for m in (1, 2, 5)]
    return [s for s in grid if s < rows] + [rows]


@compiled(cache=True)
def size_buckets(fid: I64s, mlen: U8s, suffix: Array, sizes: I64s, counts: I64s) -> None:
    """For every position matched at length L >= 2 (``fid``, ``mlen`` of `match`), and
    each of its suffixes of length l in 2..L (down the ``suffix`` links): counts[l, b] += 1,
    b being how many of the ascending ``sizes`` are <= that suffix's id."""
    nb = len(sizes)
    for i in range(len(fid)):
        length = np.int64(mlen[i])
        if length < 2:
            continue
        c = fid[i]
        b = nb
        while length >= 2:
            while b > 0 and c < sizes[b - 1]:  # ids only fall down the links
                b -= 1
            counts[length, b] += 1
            c = suffix[c]
            length -= 1


def count_by_size(
    fid: np.ndarray, mlen: np.ndarray, suffix: np.ndarray, sizes: Sequence[int], max_len: int
) -> np.ndarray:
    """``size_buckets`` of one array of matches: int64 ``[max_len + 1, len(sizes) + 1]``."""
    counts = np.zeros((max_len + 1, len(sizes) + 1), np.int64)
    size_buckets(
        np.asarray(fid, np.int64),
        np.asarray(mlen, np.uint8),
        suffix,
        np.asarray(sizes, np.int64),
        counts,
    )
    return counts


def coverage_table(hist: Sequence[int]) -> dict[str, Any]:
    """Shares of positions by match length from ``hist`` (positions by length: 0 the
    separators, excluded; 1 unmatched) and the mean length (1 for unmatched)."""
    positions = sum(hist[1:])
    by_len = {str(length): int(hist[length]) for length in range(2, len(hist))}
    mean = (
        sum(length * n for length, n in enumerate(hist) if length >= 1) / positions
        if positions
        else 0.0
    )
    return {
        "positions": int(positions),
        "unmatched": int(hist[1]) if len(hist) > 1 else 0,
        "matched_by_length": by_len,
        "mean_match_length": round(mean, 4),
        "share_unmatched": round(hist[1] / positions, 6) if positions else 0.0,
        "share_by_length": {
            k: round(v / positions, 6) if positions else 0.0 for k, v in by_len.items()
        },
    }


def coverage_by_size(
    hist: Sequence[int], counts: np.ndarray, sizes: Sequence[int], rows: int
) -> list[dict[str, Any]]:
    """`coverage_table` of the first S' rows for each S' of ``sizes``, from the table's
    ``hist`` and the summed `size_buckets` ``counts``; ``fgrams``: the rows S' holds."""
    at_least = np.cumsum(np.asarray(counts, np.int64), axis=1)  # [l, g]: id of length l < S'_g
    positions = int(sum(hist[1:]))
    max_len = len(hist) - 1
    out = []
    for g, size in enumerate(sizes):
        reach = [int(at_least[length, g]) for length in range(2, max_len + 1)] + [0]
        lengths = [int(hist[0]), positions - reach[0]]
        lengths += [reach[j] - reach[j + 1] for j in range(max_len - 1)]
        out.append({"size": int(size), "fgrams": min(int(size), rows), **coverage_table(lengths)})
    return out
