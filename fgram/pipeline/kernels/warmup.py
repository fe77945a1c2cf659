"""Compile the counting kernels ahead of the tasks that need them."""

from __future__ import annotations

import os

import numpy as np

from fgram.pipeline.kernels.counting import candidate_histogram, ids_at, unit_table
from fgram.pipeline.kernels.keys import SENTINEL, KeyCode
from fgram.pipeline.kernels.merging import (
    ids_in,
    lookup_sorted,
    merge_counts,
    merge_counts_bucketed,
)
from fgram.pipeline.kernels.streams import lists, place, segments, separate, with_separators


def compiled_before() -> bool:
    """Whether this install's kernels are in numba's disk cache already: False on the
    first run of an install (or of changed kernels), which compiles them (~10 s here)."""
    try:
        index = candidate_histogram._cache._cache_file._index_path  # type: ignore[attr-defined]
    except AttributeError:  # another numba's layout: say nothing
        return True
    return os.path.exists(index)


def warm_up() -> None:
    """Run every compiled counting kernel once on tiny data.

    The first call of a kernel compiles it (~2 s for all of them) and caches
    the machine code on disk; calling this in the driver before tasks start
    means the worker processes of this machine load it instead of each
    compiling it at once.
    """
    for dtype in (np.uint16, np.uint32):  # the common flat-file dtypes
        separate(np.array([1, 0, 2], dtype), 0, 3, True, np.empty(3, np.uint32))
    for values in (np.array([1, 2], np.uint16), np.array([1, 2], np.int32)):  # indexed formats
        place(values, np.array([1]), np.empty(3, np.uint32))
    for listed in (np.array([1, 2], np.int32), np.array([1, 2], np.int64)):  # Parquet, Arrow
        lists(listed, np.array([1, 1]), np.empty(4, np.uint32))
    for dtype in (np.uint16, np.uint32):  # tokenize's flat shards
        with_separators(np.array([1]), np.array([7], np.uint32), 0, np.empty(2, dtype), 0)
    segments(np.zeros(4, np.uint8), np.array([0, 2]), np.array([1, 1]), np.empty(2, np.uint8))
    tokens = np.array([1, 2, 1, 2, SENTINEL, 3, 2, 1, SENTINEL], np.uint32)  # two documents
    for exact in (True, False):
        uniq, _, order, _ = unit_table(tokens, tokens, 2, len(tokens) - 1, True, exact=exact)
        assert order is not None  # asked for
        ids = ids_at(np.arange(len(uniq)), order, len(tokens))
        uniq3, counts3, _, _ = unit_table(ids, tokens, 3, len(tokens), False, exact=exact)
    lookup_sorted(uniq3, uniq3)
    ids_in(uniq3, uniq3, 1)
    merge_counts([(uniq3, counts3), (uniq3[:1], counts3[:1])])
    code = KeyCode(16, 16)
    keys = np.sort(code.encode(np.arange(5), np.arange(5)))
    merge_counts_bucketed([(keys, np.ones(5, np.uint32))], code, 0, 2**64)
