"""Which rank task writes which f-grams.

The table is ordered by (count desc, length asc, tokens asc), in (count, length)
groups (`table.Groups`). A rank task sorts and numbers whole groups: contiguous
groups of about ``rank_rows`` rows make one *slot*, a task each. A group larger than
``rank_rows`` (at S = 1B the cutoff group is the largest) is a slot of its own, split
into several tasks by its rows' *lead key*, their first two tokens: every row of a
lead key falls in one task, and the lead keys order the group's rows as its tokens
do, so each task numbers its rows from the group's first id plus the rows of lower
lead keys, exact. The split points come from samples of the decoded rows' keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fgram.pipeline.kernels.ranking import Groups

SAMPLE = 256  # lead keys a decode task returns per split slot


def lead_key(tokens: np.ndarray) -> np.ndarray:
    """uint64 of each row's first two tokens (rows of at least two tokens)."""
    t = np.asarray(tokens)
    key: np.ndarray = (t[:, 0].astype(np.uint64) << np.uint64(32)) | t[:, 1].astype(np.uint64)
    return key


def group_slots(groups: Groups, parallelism: int, selected: int, rank_rows: int) -> np.ndarray:
    """First group of each slot of whole groups: slots of about ``rank_rows`` rows, as
    many as a multiple of the cores (no lone last round)."""
    rounds = max(1, math.ceil(selected / (parallelism * rank_rows)))
    return groups.split(parallelism * rounds, selected)


@dataclass(frozen=True)
class Layout:
    """Rank slots: ``firsts[s]`` is slot s's first group; ``split[s]`` the tasks of a
    slot that is one group split by lead key (absent: one task)."""

    firsts: np.ndarray
    split: dict[int, int] = field(default_factory=dict)

    @classmethod
    def plan(cls, groups: Groups, parallelism: int, selected: int, rank_rows: int) -> Layout:
        """Slots of about ``rank_rows`` rows, as many as a multiple of the cores (no lone
        last round); each group over ``rank_rows`` alone in a slot, split in tasks of
        about ``rank_rows`` of its selected rows."""
        firsts = group_slots(groups, parallelism, selected, rank_rows)
        kept = np.minimum(groups.start[1:], selected) - np.minimum(groups.start[:-1], selected)
        big = np.flatnonzero(kept > rank_rows)
        cuts = np.concatenate([firsts, big, big + 1])
        firsts = np.unique(cuts[cuts < max(len(groups.size), 1)]).astype(np.int64)
        split = {int(np.searchsorted(firsts, g)): math.ceil(int(kept[g]) / rank_rows) for g in big}
        return cls(firsts, split)

    def slot_of(self, group: np.ndarray) -> np.ndarray:
        """The slot of each row's group index."""
        return np.searchsorted(self.firsts, group, side="right") - 1

    def tasks(self) -> list[tuple[int, int]]:
        """(slot, part of it) of every rank task, in fgram_id order."""
        return [(s, j) for s in range(len(self.firsts)) for j in range(self.split.get(s, 1))]

    def groups_of(self, slot: int, n_groups: int) -> tuple[int, int]:
        """Groups [g0, g1) of a slot."""
        g1 = int(self.firsts[slot + 1]) if slot + 1 < len(self.firsts) else n_groups
        return int(self.firsts[slot]), g1


def sample(keys: np.ndarray, n: int = SAMPLE) -> np.ndarray:
    """About n evenly spaced values of sorted ``keys`` (all of them when fewer)."""
    if len(keys) <= n:
        return np.asarray(keys, np.uint64)
    at = (np.arange(n, dtype=np.int64) * len(keys)) // n
    return np.asarray(keys[at], np.uint64)


def boundaries(samples: list[tuple[int, np.ndarray]], tasks: int) -> np.ndarray:
    """``tasks - 1`` non-decreasing lead keys that split a group into about equal tasks, from
    the decode tasks' (rows, sample of their sorted keys). A task takes the keys in
    [boundary before it, boundary after it)."""
    keys = [s for _, s in samples if len(s)]
    if tasks <= 1:
        return np.zeros(0, np.uint64)
    if not keys:  # no row: every task but the first takes none
        return np.full(tasks - 1, np.iinfo(np.uint64).max, np.uint64)
    weights = np.concatenate([np.full(len(s), n / len(s)) for n, s in samples if len(s)])
    flat = np.concatenate(keys)
    order = np.argsort(flat, kind="stable")
    flat, cum = flat[order], np.cumsum(weights[order])
    want = np.arange(1, tasks) * (cum[-1] / tasks)
    at = np.minimum(np.searchsorted(cum, want), len(flat) - 1)
    return np.asarray(flat[at], np.uint64)
