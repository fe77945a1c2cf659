"""Ranking of the f-gram table (numpy and compiled kernels).

``fgram_id`` is the rank by (count desc, length asc, token ids asc). The rank
of a whole (count, length) group is known from count histograms alone, so a
task that holds complete groups can number its rows without seeing the rest:
``id = offset of the group + rank of the tokens inside the group``.
"""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import Array, U64s, compiled
from fgram.pipeline.kernels.matching import gather_rows


class Groups:
    """The (count, length) groups of the selection in rank order, with their first ids."""

    def __init__(self, hists: dict[int, dict[int, int]], cutoff: int, cut_len: int):
        pairs = sorted(
            (
                (c, k)
                for k, h in hists.items()
                for c in h
                if c > cutoff or (c == cutoff and k <= cut_len)
            ),
            key=lambda ck: (-ck[0], ck[1]),
        )
        self.count = np.array([c for c, _ in pairs], dtype=np.int64)
        self.length = np.array([k for _, k in pairs], dtype=np.int64)
        self.size = np.array([hists[k][c] for c, k in pairs], dtype=np.int64)
        self.start = np.concatenate([[0], np.cumsum(self.size)]).astype(np.int64)
        self._code = self.code(self.count, self.length)

    @staticmethod
    def code(count: np.ndarray, length: np.ndarray) -> np.ndarray:
        """A code that increases along rank order: count desc, then length asc."""
        return (-np.asarray(count, np.int64)) * 16 + np.asarray(length, np.int64)

    def index(self, count: np.ndarray, length: int, table_max: int = 1 << 20) -> np.ndarray:
        """Group index of rows (count, length); every row must belong to a group.

        The groups of this length with the lowest counts (a range of at most
        ``table_max``: most rows) are a dense table, one gather per row; the
        other rows are found by binary search."""
        count = np.asarray(count, np.int64)
        mine = np.flatnonzero(self.length == length)
        if not len(mine) or not len(count):
            return np.searchsorted(self._code, self.code(count, np.full(len(count), length)))
        lo = int(self.count[mine].min())
        top = min(int(self.count[mine].max()), lo + table_max - 1)
        table = np.full(top - lo + 1, -1, np.int64)
        low = self.count[mine] <= top
        table[self.count[mine][low] - lo] = mine[low]
        found = np.full(len(count), -1, np.int64)
        near = (count >= lo) & (count <= top)
        found[near] = table[count[near] - lo]
        rest = np.flatnonzero(found < 0)
        if len(rest):
            found[rest] = np.searchsorted(
                self._code, self.code(count[rest], np.full(len(rest), length))
            )
        return found

    def rows_in(
        self, count: np.ndarray, length: int, g0: int, g1: int, table_max: int = 1 << 22
    ) -> np.ndarray:
        """Mask of rows (count, length) that belong to groups g0 .. g1-1.

        The counts of those groups of this length become a dense table when their
        range is at most ``table_max`` (one gather per row); else each row's group
        is found by binary search."""
        mine = self.count[g0:g1][self.length[g0:g1] == length]
        if not len(mine):
            return np.zeros(len(count), bool)
        lo, hi = int(mine.min()), int(mine.max())
        count = np.asarray(count, np.int64)
        if hi - lo <= table_max:  # slot 0: below lo, slot hi-lo+2: above hi
            table = np.zeros(hi - lo + 3, bool)
            table[mine - lo + 1] = True
            found: np.ndarray = table[np.clip(count - (lo - 1), 0, hi - lo + 2)]
            return found
        mask = np.zeros(len(count), bool)
        near = np.flatnonzero((count >= lo) & (count <= hi))
        code = self.code(count[near], np.full(len(near), length))
        at = np.searchsorted(self._code, code)
        ok = (at >= g0) & (at < g1)
        ok[ok] = self._code[at[ok]] == code[ok]
        mask[near[ok]] = True
        return mask

    def task_span(
        self, task_firsts: np.ndarray, r: int, selected: int
    ) -> tuple[int, int, int, int]:
        """Groups [g0, g1) and fgram_ids [lo, hi) of rank task r."""
        g0 = int(task_firsts[r])
        g1 = int(task_firsts[r + 1]) if r + 1 < len(task_firsts) else len(self.size)
        return g0, g1, int(self.start[g0]), min(int(self.start[g1]), selected)

    def split(self, tasks: int, rows: int | None = None) -> np.ndarray:
        """First group of each of at most ``tasks`` rank tasks: contiguous groups, cut at
        the group boundaries nearest to equal shares of the first ``rows`` rows (the
        selection; default all). Fewer tasks only where one group outweighs a share."""
        total = int(self.start[-1]) if rows is None else min(rows, int(self.start[-1]))
        if not len(self.size) or tasks <= 1 or total == 0:
            return np.zeros(1, np.int64)
        ideal = np.arange(1, tasks) * (total / tasks)
        right = np.minimum(np.searchsorted(self.start, ideal), len(self.size))
        left = np.maximum(right - 1, 0)
        near = np.where(
            np.abs(self.start[left] - ideal) <= np.abs(self.start[right] - ideal), left, right
        )
        near = near[(near > 0) & (near < len(self.size)) & (self.start[near] < total)]
        return np.unique(np.concatenate([[0], near])).astype(np.int64)


def bucket_order(task: np.ndarray, n_tasks: int) -> np.ndarray:
    """Stable order of rows by their rank task (small integers: numpy's radix sort)."""
    small = np.uint16 if n_tasks <= 2**16 else np.uint32
    return np.argsort(task.astype(small), kind="stable")


def dense_rank_desc(counts: np.ndarray) -> tuple[np.ndarray, int]:
    """(rank of each count among the distinct counts, largest first; how many distinct).

    Counts in a range of at most a few times their number (the usual case: a
    rank task's groups) are ranked through a table over the range, O(n); others
    by `np.unique` (a sort)."""
    c = np.asarray(counts, np.int64)
    if not len(c):
        return np.zeros(0, np.int64), 0
    lo, hi = int(c.min()), int(c.max())
    if hi - lo > max(4 * len(c), 1 << 16):
        distinct, rank = np.unique(-c, return_inverse=True)
        return rank.reshape(-1), len(distinct)
    present = np.zeros(hi - lo + 1, np.int64)
    present[c - lo] = 1
    above = np.cumsum(present[::-1])[::-1]  # distinct counts >= lo + i
    return above[c - lo] - 1, int(above[0])


def rank_order(tokens: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Order of distinct rows of one length by (count desc, tokens asc).

    The counts become their dense descending rank; the rank and as many leading
    tokens as fit make one uint64 word, the other tokens a few more. One
    argsort of the first word orders the rows except where it ties (same count
    and leading tokens); only those rows are then lexsorted by every word.
    """
    n, k = tokens.shape
    vbits = max(int(tokens.max(initial=0)).bit_length(), 1)
    rank, distinct = dense_rank_desc(counts)
    rbits = max(int(distinct - 1).bit_length(), 1)
    lead = min(k, (64 - rbits) // vbits)
    head = np.empty(n, np.uint64)
    pack_head(tokens, rank, lead, np.uint64(vbits), head)
    order = np.argsort(head)
    if lead == k:
        return order
    sorted_head = head[order]
    tie = np.flatnonzero(sorted_head[1:] == sorted_head[:-1])
    if len(tie):  # the rows of tied runs sit at these positions, runs in order
        in_run = np.zeros(n, bool)
        in_run[tie] = True
        in_run[tie + 1] = True
        at = np.flatnonzero(in_run)
        rows = order[at]
        rest = tokens[rows, lead:]
        per = 64 // vbits
        words = []
        for s in range(0, k - lead, per):
            w = np.zeros(len(rows), np.uint64)
            for j in range(s, min(s + per, k - lead)):
                w <<= np.uint64(vbits)
                w |= rest[:, j].astype(np.uint64)
            words.append(w)
        order[at] = rows[np.lexsort(words[::-1] + [sorted_head[at]])]
    return order


@compiled(cache=True, nogil=True)
def extend_rows(prefix_tokens: Array, rows: Array, last: Array, out: Array) -> None:
    """out[i] = the tokens of row ``rows[i]`` of ``prefix_tokens``, then ``last[i]``."""
    k = prefix_tokens.shape[1]
    for i in range(len(rows)):
        r = rows[i]
        for j in range(k):
            out[i, j] = prefix_tokens[r, j]
        out[i, k] = last[i]


def take_rows(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``rows[order]`` for a 2-d array of a few columns, by `matching.gather_rows`
    (numpy's fancy indexing of short rows costs several times its loop)."""
    out = np.empty((len(order), rows.shape[1]), rows.dtype)
    gather_rows(np.ascontiguousarray(rows), np.asarray(order, np.int64), out)
    return out


@compiled(cache=True, nogil=True)
def pack_head(tokens: Array, rank: Array, lead: int, vbits: np.uint64, out: U64s) -> None:
    """out[i] = rank[i], then tokens[i, :lead] (vbits each), as one uint64 (`table.rank_order`)."""
    for i in range(tokens.shape[0]):
        h = np.uint64(rank[i])
        for j in range(lead):
            h = (h << vbits) | np.uint64(tokens[i, j])
        out[i] = h


@compiled(cache=True, nogil=True)
def place_ranked(
    counts: Array,
    order: Array,
    gcount: Array,
    gstart: Array,
    lo: int,
    hi: int,
    k: int,
    lengths: Array,
    out_counts: Array,
    dest: Array,
) -> bool:
    """Number rows of one length, visited in rank order (``order``), in whole groups:
    ``gcount``/``gstart`` are this length's groups (counts descending, first ids). Row
    order[i] gets id gstart[g] + (i - first i of its count); ids in [lo, hi) are written
    (lengths, out_counts at id - lo) and dest[i] = id - lo, else dest[i] = -1. False if a
    row's count has no group."""
    g = -1
    run = 0
    prev = -1
    for i in range(len(order)):
        c = counts[order[i]]
        if c != prev:
            prev = c
            run = i
            g += 1
            while g < len(gcount) and gcount[g] != c:
                g += 1
            if g == len(gcount):
                return False
        fid = gstart[g] + (i - run)
        if fid < hi:
            p = fid - lo
            lengths[p] = k
            out_counts[p] = c
            dest[i] = p
        else:
            dest[i] = -1
    return True


@compiled(cache=True, nogil=True)
def scatter_rows(tokens: Array, order: Array, dest: Array, offsets: Array, flat: Array) -> None:
    """flat[offsets[dest[i]]:][:k] = tokens[order[i]] for every i with dest[i] >= 0."""
    k = tokens.shape[1]
    for i in range(len(order)):
        p = dest[i]
        if p >= 0:
            o = offsets[p]
            r = order[i]
            for j in range(k):
                flat[o + j] = tokens[r, j]
