"""Compiled kernels of matching: the longest f-gram ending at each position, by flat
open-addressing hash tables of chained keys (`index.FgramIndex`, `embed.FgramStore`).

Lookups are memory-latency bound: a probe of a table of hundreds of MB costs
a DRAM round trip when issued alone, a fraction of one when many are in
flight. The kernels therefore issue their probes in batches of
independent loads (one per lane) and decide in a separate loop, instead of
chasing one position's chain at a time.
"""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import Array, I64s, U8s, U32s, U64s, compiled
from fgram.pipeline.kernels.keys import EMPTY, chain_key1

# an index as the kernels read it (`index.FgramIndex.arrays`): (K, the flat hash table of
# each length 2..K, their first-slot shifts, the suffix link of each f-gram id)
IndexArrays = tuple[int, tuple[U64s, ...], U64s, Array]

LANES = 128  # independent streams of positions matched side by side


_START = np.uint32(1 << 31)  # match_longest: "a document starts here" bit


_TOKEN = np.uint32((1 << 31) - 1)
# what a probe of a damaged table finds (a run past the overflow rows, an id out of
# range): the kernels stop and return DAMAGED, and their callers raise an error naming
# the index; never a read out of bounds (a flipped bit must not crash a server)
DAMAGED = -2
OK = 0


@compiled(cache=True, inline="always")
def _probe_from(tab: U64s, s: int, q: np.uint64, nf: int) -> int:
    """Linear probing from slot offset ``s`` (tab is flat [key, value, key, value, ...]):
    the value of key ``q``, -1 where absent, DAMAGED past the table's end or where the
    value is not an id below ``nf``."""
    while s + 1 < len(tab):
        k = tab[s]
        if k == q:
            found: int = np.int64(tab[s + 1])
            return found if 0 <= found < nf else DAMAGED
        if k == EMPTY:
            return -1
        s += 2
    return DAMAGED


@compiled(cache=True, inline="always")
def _valid(r: int, nf: int) -> bool:
    """Whether ``r`` is a found id (below ``nf``) or -1 (none): anything else is damage."""
    return -1 <= r < nf


@compiled(cache=True)
def fill_table(tab: U64s, shift: np.uint64, keys: U64s, vals: Array) -> bool:
    """Insert distinct keys (first slot: top bits) into an empty flat table; False on overflow."""
    limit = len(tab)
    for i in range(len(keys)):
        s = np.int64(keys[i] >> shift) * 2
        while tab[s] != EMPTY:
            s += 2
            if s >= limit:
                return False
        tab[s] = keys[i]
        tab[s + 1] = np.uint64(vals[i])
    return True


@compiled(cache=True)
def find_keys(tab: U64s, shift: np.uint64, queries: U64s, out: I64s, nf: int) -> int:
    """out[i] = value of queries[i] (an id below ``nf``), -1 where absent; OK, or
    DAMAGED (`_probe_from`)."""
    for i in range(len(queries)):
        r = _probe_from(tab, np.int64(queries[i] >> shift) * 2, queries[i], nf)
        if r == DAMAGED:
            return DAMAGED
        out[i] = r
    return OK


@compiled(cache=True, nogil=True)
def match_longest(
    tokens: U32s,
    ix: IndexArrays,
    fid: I64s,
    mlen: U8s,
    lanes: int,
) -> int:
    """Longest f-gram ending at every position (see `index.FgramIndex.match`); OK, or
    DAMAGED where the index is (`_probe_from`, a suffix link out of range).

    ``ix`` = (max_len, tabs, shifts, suffix): ``tabs[L-2]``/``shifts[L-2]``: the flat hash
    table of length L;
    ``suffix[id]``: id of the f-gram without its first token (length >= 3).
    ``tokens``: uint32 token ids (< 2**31) with the top bit set where a
    document starts. Writes ``fid`` (-1 where none) and ``mlen`` (1 where none).

    The longest match ending at i extends a suffix of the longest one ending
    at i-1 (the table is closed under prefixes and suffixes), so each
    position tries the extension of the previous match and, on a miss,
    shortens it by suffix links: about 1.3 probes a position instead of one
    per length. The array is cut into ``lanes`` streams matched side by side;
    each starts max_len-1 positions early (a warm-up it does not write), so
    its first own position sees every f-gram that can end there.
    """
    max_len, tabs, shifts, suffix = ix
    nf = len(suffix)
    n = len(tokens)
    seg = (n + lanes - 1) // lanes if n else 0
    own = np.empty(lanes, np.int64)
    base = np.empty(lanes, np.int64)
    stop = np.empty(lanes, np.int64)
    for g in range(lanes):
        own[g] = min(g * seg, n)
        base[g] = max(own[g] - (max_len - 1), 0)
        stop[g] = min(own[g] + seg, n)
    cid = np.full(lanes, -1, np.int64)
    clen = np.zeros(lanes, np.int64)  # 0: nothing seen yet (a start)
    pend = np.empty(lanes, np.int64)
    qs = np.empty(lanes, np.uint64)
    sl = np.empty(lanes, np.int64)
    kk = np.empty(lanes, np.uint64)
    vv = np.empty(lanes, np.uint64)
    for step in range(seg + max_len - 1):
        npend = 0
        for g in range(lanes):
            i = base[g] + step
            if i >= stop[g]:
                continue
            if clen[g] == 0 or tokens[i] >= _START:
                cid[g] = -1
                clen[g] = 1
                if i >= own[g]:
                    fid[i] = -1
                    mlen[i] = 1
                continue
            if clen[g] == max_len:  # cannot grow: shorten first
                cid[g] = suffix[cid[g]]
                if not _valid(cid[g], nf):
                    return DAMAGED
                clen[g] = max_len - 1
            pend[npend] = g
            npend += 1
        while npend:
            for x in range(npend):  # the queries
                g = pend[x]
                i = base[g] + step
                L = clen[g]
                pre = np.uint64(tokens[i - 1] & _TOKEN) if L == 1 else np.uint64(cid[g])
                q = chain_key1(pre, tokens[i] & _TOKEN)
                qs[x] = q
                sl[x] = np.int64(q >> shifts[L - 1]) * 2
            for x in range(npend):  # their first slots: independent loads
                tab = tabs[clen[pend[x]] - 1]
                kk[x] = tab[sl[x]]
                vv[x] = tab[sl[x] + 1]
            m = 0
            for x in range(npend):  # decide
                g = pend[x]
                i = base[g] + step
                L = clen[g]
                if kk[x] == qs[x]:
                    r = np.int64(vv[x])
                    r = r if r < nf else DAMAGED
                elif kk[x] == EMPTY:
                    r = -1
                else:
                    r = _probe_from(tabs[L - 1], sl[x] + 2, qs[x], nf)
                if r < -1:
                    return DAMAGED
                if r >= 0:
                    cid[g] = r
                    clen[g] = L + 1
                elif L == 1:
                    cid[g] = -1
                else:
                    pend[m] = g
                    m += 1
                    continue
                if i >= own[g]:
                    fid[i] = cid[g]
                    mlen[i] = clen[g]
            npend = m
            for x in range(npend):  # shorten by one: suffix links
                g = pend[x]
                cid[g] = suffix[cid[g]]
                if not _valid(cid[g], nf):
                    return DAMAGED
                clen[g] -= 1
    return OK


@compiled(cache=True)
def step_matches(
    cid: I64s,
    clen: I64s,
    prev: I64s,
    tok: I64s,
    ix: IndexArrays,
) -> int:
    """One new token per sequence: update each (longest match id, length) in place; OK,
    or DAMAGED (`match_longest`).

    ``clen`` 0 means the sequence is empty (the token starts it), 1 means no
    match ends at the previous token (``prev`` is that token). Same walk as
    `match_longest`: extend, else shorten by suffix links; at most K-1 probes.
    """
    max_len, tabs, shifts, suffix = ix
    nf = len(suffix)
    for b in range(len(tok)):
        L = clen[b]
        if L == 0:
            cid[b] = -1
            clen[b] = 1
            continue
        c = cid[b]
        t = np.uint64(tok[b])
        if max_len == L:
            c = suffix[c]
            if not _valid(c, nf):
                return DAMAGED
            L -= 1
        while True:
            pre = np.uint64(prev[b]) if L == 1 else np.uint64(c)
            q = chain_key1(pre, t)
            r = _probe_from(tabs[L - 1], np.int64(q >> shifts[L - 1]) * 2, q, nf)
            if r == DAMAGED:
                return DAMAGED
            if r >= 0:
                c = r
                L += 1
                break
            if L == 1:
                c = -1
                break
            c = suffix[c]
            if not _valid(c, nf):
                return DAMAGED
            L -= 1
        cid[b] = c
        clen[b] = L
    return OK


@compiled(cache=True)
def last_matches(
    tails: Array,
    ix: IndexArrays,
    fid: I64s,
    mlen: U8s,
) -> int:
    """Longest match ending at the last token of each row of ``tails`` [B, w]
    (each row its own document): `step_matches` over the w columns. Writes
    ``fid`` (-1 where none) and ``mlen`` (1 where none); OK, or DAMAGED."""
    n = len(tails)
    prev = np.zeros(n, np.int64)
    col = np.empty(n, np.int64)
    cid = np.full(n, -1, np.int64)
    clen = np.zeros(n, np.int64)
    for j in range(tails.shape[1]):
        for b in range(n):
            col[b] = tails[b, j]
        if step_matches(cid, clen, prev, col, ix) != OK:
            return DAMAGED
        prev[:] = col
    for b in range(n):
        fid[b] = cid[b] if clen[b] >= 2 else -1
        mlen[b] = max(clen[b], 1)
    return OK


@compiled(cache=True)
def gather_rows(matrix: Array, ids: I64s, out: Array) -> None:
    """out[i] = matrix[ids[i]], zeros where ids[i] < 0."""
    for i in range(len(ids)):
        if ids[i] < 0:
            out[i, :] = 0
        else:
            out[i, :] = matrix[ids[i], :]
