"""Compiled (numba) kernels for the hot loops that numpy cannot fuse.

Each kernel is a plain function of numpy arrays, compiled on first use and
cached on disk (``cache=True``), so a worker process pays the compile once.
Everything here has a brute-force oracle in the tests.

Lookups are memory-latency bound: a probe of a table of hundreds of MB costs
a DRAM round trip when issued alone, a fraction of one when many are in
flight. The kernels therefore issue their probes in batches of
independent loads (one per lane) and decide in a separate loop, instead of
chasing one position's chain at a time.
"""

from __future__ import annotations

import numba
import numpy as np

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_M = np.uint64(0x9E3779B97F4A7C15)
LANES = 128  # independent streams of positions matched side by side
_START = np.uint32(1 << 31)  # match_longest: "a document starts here" bit
_TOKEN = np.uint32((1 << 31) - 1)


@numba.njit(cache=True, inline="always")
def mix1(x):
    """`kernels.mix` of one uint64."""
    x ^= x >> np.uint64(31)
    x *= _M
    x ^= x >> np.uint64(29)
    return x


@numba.njit(cache=True, inline="always")
def chain_key1(prefix, last):
    """The mixed key of (prefix id or first token, last token): `index.chain_key` of one."""
    return mix1((np.uint64(prefix) << np.uint64(32)) | np.uint64(last))


@numba.njit(cache=True, inline="always")
def _probe_from(tab, s, q):
    """Linear probing from slot offset ``s`` (tab is flat [key, value, key, value, ...])."""
    while True:
        k = tab[s]
        if k == q:
            return np.int64(tab[s + 1])
        if k == EMPTY:
            return -1
        s += 2


@numba.njit(cache=True)
def fill_table(tab, shift, keys, vals):
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


@numba.njit(cache=True)
def find_keys(tab, shift, queries, out):
    """out[i] = value of queries[i], -1 where absent."""
    for i in range(len(queries)):
        out[i] = _probe_from(tab, np.int64(queries[i] >> shift) * 2, queries[i])


@numba.njit(cache=True, nogil=True)
def match_longest(tokens, max_len, tabs, shifts, suffix, fid, mlen, lanes):
    """Longest f-gram ending at every position (see `index.FgramIndex.match`).

    ``tabs[L-2]``/``shifts[L-2]``: the flat hash table of length L;
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
                elif kk[x] == EMPTY:
                    r = -1
                else:
                    r = _probe_from(tabs[L - 1], sl[x] + 2, qs[x])
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
                clen[g] -= 1


@numba.njit(cache=True)
def step_matches(cid, clen, prev, tok, max_len, tabs, shifts, suffix):
    """One new token per sequence: update each (longest match id, length) in place.

    ``clen`` 0 means the sequence is empty (the token starts it), 1 means no
    match ends at the previous token (``prev`` is that token). Same walk as
    `match_longest`: extend, else shorten by suffix links; at most K-1 probes.
    """
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
            L -= 1
        while True:
            pre = np.uint64(prev[b]) if L == 1 else np.uint64(c)
            q = chain_key1(pre, t)
            r = _probe_from(tabs[L - 1], np.int64(q >> shifts[L - 1]) * 2, q)
            if r >= 0:
                c = r
                L += 1
                break
            if L == 1:
                c = -1
                break
            c = suffix[c]
            L -= 1
        cid[b] = c
        clen[b] = L


@numba.njit(cache=True)
def last_matches(tails, max_len, tabs, shifts, suffix, fid, mlen):
    """Longest match ending at the last token of each row of ``tails`` [B, w]
    (each row its own document): `step_matches` over the w columns. Writes
    ``fid`` (-1 where none) and ``mlen`` (1 where none)."""
    n = len(tails)
    prev = np.zeros(n, np.int64)
    col = np.empty(n, np.int64)
    cid = np.full(n, -1, np.int64)
    clen = np.zeros(n, np.int64)
    for j in range(tails.shape[1]):
        for b in range(n):
            col[b] = tails[b, j]
        step_matches(cid, clen, prev, col, max_len, tabs, shifts, suffix)
        prev[:] = col
    for b in range(n):
        fid[b] = cid[b] if clen[b] >= 2 else -1
        mlen[b] = max(clen[b], 1)


@numba.njit(cache=True)
def gather_rows(matrix, ids, out):
    """out[i] = matrix[ids[i]], zeros where ids[i] < 0."""
    for i in range(len(ids)):
        if ids[i] < 0:
            out[i, :] = 0
        else:
            out[i, :] = matrix[ids[i], :]


# ------------------------------------------------------------------ counting

_INVALID32 = np.uint32(0xFFFFFFFF)


@numba.njit(cache=True, inline="always")
def code_key1(prefix, last, code):
    """`kernels.KeyCode.encode` of one (prefix, last), before the shift to the top bits.

    ``code`` = (last_bits, s1, s2, mask): the raw key ``prefix << last_bits |
    last`` mixed by a bijection of ``bits``-bit integers (xorshift, multiply by
    an odd constant modulo 2**bits, xorshift).
    """
    vbits, s1, s2, mask = code
    x = (np.uint64(prefix) << vbits) | np.uint64(last)
    x ^= x >> s1
    x = (x * _M) & mask
    x ^= x >> s2
    return x


@numba.njit(cache=True, nogil=True)
def candidate_histogram(prev, tokens, k, n_pos, code, shift, step, hist):
    """Count the candidate k-grams per bucket (a bucket = the top bits of the mixed key),
    at every ``step``-th position (1: all of them; more: an estimate).

    A position i is a candidate iff ``prev[i]`` and ``prev[i+1]`` are ids (not
    INVALID); its key is ``code_key1(prev[i], tokens[i+k-1])``, its bucket
    that key ``>> shift``.
    """
    for i in range(0, n_pos, step):
        a = prev[i]
        if a == _INVALID32 or prev[i + 1] == _INVALID32:
            continue
        hist[np.int64(code_key1(a, tokens[i + k - 1], code) >> shift)] += 1


@numba.njit(cache=True, nogil=True)
def scatter_exact(prev, tokens, k, n_pos, code, shift, pos_bits, bounds, packed, ends):
    """Place every candidate in its bucket as one exact uint64: the key's bits
    below the bucket bits, then its position (``pos_bits`` bits). Sorting a
    bucket then orders it by key, and by position within a key.

    Bucket b holds at most ``bounds[b+1] - bounds[b]`` entries (exact sizes, or
    room for an estimate); ``ends[b]`` is where its entries end. Returns False,
    with the buckets unusable, as soon as one is full (never with exact sizes)."""
    cursor = ends
    cursor[:] = bounds[:-1]
    rest = (np.uint64(1) << shift) - np.uint64(1)
    for i in range(n_pos):
        a = prev[i]
        if a == _INVALID32 or prev[i + 1] == _INVALID32:
            continue
        x = code_key1(a, tokens[i + k - 1], code)
        b = np.int64(x >> shift)
        d = cursor[b]
        if d == bounds[b + 1]:
            return False
        cursor[b] = d + 1
        packed[d] = ((x & rest) << pos_bits) | np.uint64(i)
    return True


@numba.njit(cache=True, nogil=True)
def exact_runs(packed, bstart, bend, shift, pos_bits, up, limit, uniq, counts, starts, order):
    """Distinct keys in order from buckets of `scatter_exact` entries that numpy
    sorted in place (bucket b: ``packed[bstart[b]:bend[b]]``; gaps between buckets
    are skipped): one sequential pass (see `bucket_runs` for the outputs, here
    without gaps). ``up`` shifts a key to the top bits of its uint64. A run's count
    is kept in a register and stored when the run ends."""
    pmask = (np.uint64(1) << pos_bits) - np.uint64(1)
    lim = np.int64(limit)
    u = 0
    o = 0
    for p in range(len(bstart)):
        b0 = bstart[p]
        b1 = bend[p]
        if b1 == b0:
            continue
        top = np.uint64(p) << shift
        last = packed[b0] >> pos_bits
        uniq[u] = (top | last) << up
        starts[u] = o
        c = np.uint32(0)
        for d in range(b0, b1):
            v = packed[d]
            r = v >> pos_bits
            w = np.int64(v & pmask)
            if r != last:
                counts[u] = c
                u += 1
                uniq[u] = (top | r) << up
                starts[u] = o
                c = np.uint32(0)
                last = r
            order[o] = w
            o += 1
            c += np.uint32(w < lim)
        counts[u] = c
        u += 1
    starts[u] = o
    return u


@numba.njit(cache=True, nogil=True)
def scatter_buckets(prev, tokens, k, n_pos, code, shift, up, bounds, lo_bits, keys, where, packed):
    """When a key and a position do not fit one uint64 together: place every
    candidate in its bucket (``keys`` shifted up by ``up``, ``where`` = its
    position), then pack each: ``packed`` = (key's bits above ``lo_bits``) |
    (its index in the bucket)."""
    cursor = bounds[:-1].copy()
    for i in range(n_pos):
        a = prev[i]
        if a == _INVALID32 or prev[i + 1] == _INVALID32:
            continue
        x = code_key1(a, tokens[i + k - 1], code)
        b = np.int64(x >> shift)
        d = cursor[b]
        cursor[b] = d + 1
        keys[d] = x << up
        where[d] = i
    lo = np.uint64((1 << lo_bits) - 1)
    for b in range(len(bounds) - 1):  # sequential: cheap next to the scatter above
        for d in range(bounds[b], bounds[b + 1]):
            packed[d] = (keys[d] & ~lo) | np.uint64(d - bounds[b])


@numba.njit(cache=True, nogil=True)
def bucket_runs(packed, keys, where, bounds, lo_bits, limit, uniq, counts, starts, order):
    """Distinct keys in order, from buckets whose packed entries numpy sorted in place.

    Buckets hold disjoint, increasing key ranges, so their runs, in bucket
    order, are the unit's sorted distinct keys: ``uniq``/``counts`` (only
    positions < ``limit`` count). ``order`` lists the candidates' positions
    grouped by key, in key order: key r's positions are
    ``order[starts[r]:starts[r+1]]``. Entries whose packed top bits tie are
    ordered by full key with an insertion sort (ties of distinct keys are
    rare: about n^2 / 2^(65-lo_bits)). Returns the number of distinct keys.
    """
    lo = np.uint64((1 << lo_bits) - 1)
    hi = ~lo
    u = 0
    for p in range(len(bounds) - 1):
        b0 = bounds[p]
        n = bounds[p + 1] - b0
        s = 0
        while s < n:
            top = packed[b0 + s] & hi
            e = s + 1
            while e < n and (packed[b0 + e] & hi) == top:
                e += 1
            if e - s > 1:
                for a in range(s + 1, e):
                    x = packed[b0 + a]
                    kx = keys[b0 + np.int64(x & lo)]
                    c = a - 1
                    while c >= s and keys[b0 + np.int64(packed[b0 + c] & lo)] > kx:
                        packed[b0 + c + 1] = packed[b0 + c]
                        c -= 1
                    packed[b0 + c + 1] = x
            last = np.uint64(0)
            for a in range(s, e):
                j = b0 + np.int64(packed[b0 + a] & lo)
                key = keys[j]
                if a == s or key != last:
                    uniq[u] = key
                    counts[u] = 0
                    starts[u] = b0 + a
                    u += 1
                    last = key
                w = where[j]
                order[b0 + a] = w
                if w < limit:
                    counts[u - 1] += np.uint32(1)
            s = e
    starts[u] = bounds[len(bounds) - 1]
    return u


@numba.njit(cache=True, nogil=True)
def scatter_counted(keys, counts, up, top_shift, base, rest_mask, cursor, packed):
    """Place sorted (key, count) entries in their buckets (``key >> top_shift``,
    less ``base``) as one uint64: the key's bits below the bucket bits (keys
    sit above ``up`` zero bits), then the count (32 bits)."""
    for i in range(len(keys)):
        key = keys[i]
        b = np.int64(key >> top_shift) - base
        d = cursor[b]
        cursor[b] = d + 1
        packed[d] = (((key >> up) & rest_mask) << np.uint64(32)) | np.uint64(counts[i])


@numba.njit(cache=True, nogil=True)
def counted_runs(packed, bounds, base, rest_bits, up, out_keys, out_counts):
    """Sum the counts of equal keys in buckets of `scatter_counted` entries that
    numpy sorted in place; writes the distinct keys in order. Returns their number."""
    low = np.uint64(0xFFFFFFFF)
    u = 0
    for p in range(len(bounds) - 1):
        top = np.uint64(base + p) << rest_bits
        last = np.uint64(0)
        for d in range(bounds[p], bounds[p + 1]):
            v = packed[d]
            r = v >> np.uint64(32)
            if d == bounds[p] or r != last:
                out_keys[u] = (top | r) << up
                out_counts[u] = np.int64(v & low)
                u += 1
                last = r
            else:
                out_counts[u - 1] += np.int64(v & low)
    return u


@numba.njit(cache=True, nogil=True)
def spread(values, starts, order, out):
    """out[order[e]] = values[r] for every e in starts[r]:starts[r+1], except where
    values[r] is INVALID (what ``out`` holds already)."""
    for r in range(len(values)):
        v = values[r]
        if v == _INVALID32:
            continue
        for e in range(starts[r], starts[r + 1]):
            out[order[e]] = v


@numba.njit(cache=True, nogil=True)
def join_sorted(table, queries, offset, missing, out):
    """out[i] = offset + index of queries[i] in table, or ``missing`` (both sorted
    ascending; the table distinct, the queries may repeat).

    Branch-free merge: each step advances the queries (on a hit or when the
    query is smaller) or the table, so the loop carries no data-dependent
    branch to mispredict.
    """
    out[:] = missing
    i = 0
    j = 0
    nq = len(queries)
    nt = len(table)
    while i < nq and j < nt:
        a = queries[i]
        b = table[j]
        out[i] = offset + j if a == b else out[i]
        i += a <= b
        j += b < a


@numba.njit(cache=True, nogil=True)
def merge_two(ka, ca, kb, cb, ko, co):
    """Merge two sorted runs of distinct keys, summing the counts of shared keys.

    Branch-free inner loop (see `join_sorted`). Returns the merged length.
    """
    i = 0
    j = 0
    m = 0
    na = len(ka)
    nb = len(kb)
    while i < na and j < nb:
        a = ka[i]
        b = kb[j]
        ta = a <= b
        tb = b <= a
        ko[m] = a if ta else b
        co[m] = (ca[i] if ta else 0) + (cb[j] if tb else 0)
        i += ta
        j += tb
        m += 1
    while i < na:
        ko[m] = ka[i]
        co[m] = ca[i]
        i += 1
        m += 1
    while j < nb:
        ko[m] = kb[j]
        co[m] = cb[j]
        j += 1
        m += 1
    return m


# ------------------------------------------------------------------ reading


@numba.njit(cache=True, nogil=True)
def separate(body, sep, own, sep_before, tokens):
    """A flat range's raw values -> uint32 tokens with 2**32-1 at separators, in one pass.

    ``own``: how many leading values belong to the range (the rest is overlap);
    ``sep_before``: a separator (or the file start) precedes the first value.
    Returns (documents started among the own values, own non-separator
    values, min and max of the non-separator values; 0, -1 when none).
    Branch-free loop bodies (selects, not jumps: the compiler vectorises them).
    """
    n = len(body)
    m = min(own, n)
    big = np.int64(1) << np.int64(62)
    vmin = big
    vmax = -big
    docs = np.int64(0)
    seps = np.int64(0)
    prev = np.int64(1) if sep_before else np.int64(0)
    for i in range(m):
        v = np.int64(body[i])
        s = np.int64(v == sep)
        tokens[i] = _INVALID32 if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        docs += prev & (1 - s)
        seps += s
        prev = s
    rest = np.int64(0)
    for i in range(m, n):
        v = np.int64(body[i])
        s = np.int64(v == sep)
        tokens[i] = _INVALID32 if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        rest += s
    if seps + rest == n:
        return docs, np.int64(0), np.int64(0), np.int64(-1)
    return docs, m - seps, vmin, vmax


# ------------------------------------------------------------------ refresh scans


@numba.njit(cache=True)
def hash_rows(rows, out):
    """out[r] = the window hash of rows[r] (a 2-d uint32 array of token windows):
    mix(sum of (token + 1) * M**(w-1-j)) >> 1, the hash `windows_in_set` rolls."""
    for r in range(rows.shape[0]):
        h = np.uint64(0)
        for j in range(rows.shape[1]):
            h = h * _M + np.uint64(rows[r, j]) + np.uint64(1)
        out[r] = mix1(h) >> np.uint64(1)


@numba.njit(cache=True, inline="always")
def _bit_of(h, bmask):
    """A window hash's bit in the bitmap of `fill_bits` / `windows_in_set` (one place,
    so that filling and testing can never disagree)."""
    return (h >> np.uint64(20)) & bmask


@numba.njit(cache=True)
def fill_set(tab, hashes):
    """Insert hashes into an empty open-addressing set (len a power of two, > len(hashes))."""
    mask = np.uint64(len(tab) - 1)
    for i in range(len(hashes)):
        s = hashes[i] & mask
        while tab[s] != EMPTY and tab[s] != hashes[i]:
            s = (s + np.uint64(1)) & mask
        tab[s] = hashes[i]


@numba.njit(cache=True, nogil=True)
def windows_in_set(tokens, w, tab, bits, out):
    """out[i] = whether the window tokens[i:i+w] (boundary-free) hashes into the set:
    a superset of the windows equal to one of the set's rows (callers verify).

    The window hash is rolled (one multiply per token); ``bits``, a cache-sized
    bitmap of the set's hashes (a power of two of uint64 words), is tested
    first, so that most windows never probe the table."""
    mask = np.uint64(len(tab) - 1)
    bmask = np.uint64(len(bits) * 64 - 1)
    top = np.uint64(1)
    for _ in range(w - 1):
        top *= _M
    h = np.uint64(0)
    run = 0
    out[:] = False
    for i in range(len(tokens)):
        t = tokens[i]
        if t == _INVALID32:
            run = 0
            h = np.uint64(0)
            continue
        if run >= w:
            h -= top * (np.uint64(tokens[i - w]) + np.uint64(1))
        h = h * _M + np.uint64(t) + np.uint64(1)
        run += 1
        if run >= w and _in_set(mix1(h) >> np.uint64(1), tab, mask, bits, bmask):
            out[i - w + 1] = True


@numba.njit(cache=True, inline="always")
def _in_set(x, tab, mask, bits, bmask):
    """Whether window hash x is in the set (`fill_set` / `fill_bits`): its bit first."""
    b = _bit_of(x, bmask)
    if not (bits[b >> np.uint64(6)] >> (b & np.uint64(63))) & np.uint64(1):
        return False
    s = x & mask
    while tab[s] != EMPTY:
        if tab[s] == x:
            return True
        s = (s + np.uint64(1)) & mask
    return False


@numba.njit(cache=True, nogil=True)
def windows_at_in_set(tokens, w, starts, tab, bits, out):
    """`windows_in_set` for the windows at ``starts`` only: out[j] = whether window
    starts[j] (boundary-free, within tokens) hashes into the set."""
    mask = np.uint64(len(tab) - 1)
    bmask = np.uint64(len(bits) * 64 - 1)
    for j in range(len(starts)):
        p = np.int64(starts[j])
        out[j] = False
        if p + w > len(tokens):
            continue
        h = np.uint64(0)
        whole = True
        for i in range(p, p + w):
            if tokens[i] == _INVALID32:
                whole = False
                break
            h = h * _M + np.uint64(tokens[i]) + np.uint64(1)
        if whole:
            out[j] = _in_set(mix1(h) >> np.uint64(1), tab, mask, bits, bmask)


@numba.njit(cache=True)
def fill_bits(bits, hashes):
    """Set each hash's bit in a bitmap for `windows_in_set`."""
    bmask = np.uint64(len(bits) * 64 - 1)
    for i in range(len(hashes)):
        b = _bit_of(hashes[i], bmask)
        bits[b >> np.uint64(6)] |= np.uint64(1) << (b & np.uint64(63))


@numba.njit(cache=True, nogil=True)
def combine_runs(bk, bc, dk, dc, floor, ok, oc):
    """Totals of a base run (distinct sorted keys, counts) and a delta run (signed counts)
    in one merge pass; writes the keys whose total is >= floor into ok/oc.
    Returns (number written, whether a total went negative)."""
    i = 0
    j = 0
    m = 0
    nb = len(bk)
    nd = len(dk)
    bad = False
    while i < nb or j < nd:
        if j >= nd or (i < nb and bk[i] < dk[j]):
            key = bk[i]
            t = np.int64(bc[i])
            i += 1
        elif i >= nb or dk[j] < bk[i]:
            key = dk[j]
            t = np.int64(dc[j])
            j += 1
        else:
            key = bk[i]
            t = np.int64(bc[i]) + np.int64(dc[j])
            i += 1
            j += 1
        if t < 0:
            bad = True
        if t >= floor:
            ok[m] = key
            oc[m] = t
            m += 1
    return m, bad


@numba.njit(cache=True, nogil=True)
def pack_head(tokens, rank, lead, vbits, out):
    """out[i] = rank[i], then tokens[i, :lead] (vbits each), as one uint64 (`table.rank_order`)."""
    for i in range(tokens.shape[0]):
        h = np.uint64(rank[i])
        for j in range(lead):
            h = (h << vbits) | np.uint64(tokens[i, j])
        out[i] = h


@numba.njit(cache=True, nogil=True)
def place_ranked(counts, order, gcount, gstart, lo, hi, k, lengths, out_counts, dest):
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


@numba.njit(cache=True, nogil=True)
def scatter_rows(tokens, order, dest, offsets, flat):
    """flat[offsets[dest[i]]:][:k] = tokens[order[i]] for every i with dest[i] >= 0."""
    k = tokens.shape[1]
    for i in range(len(order)):
        p = dest[i]
        if p >= 0:
            o = offsets[p]
            r = order[i]
            for j in range(k):
                flat[o + j] = tokens[r, j]


@numba.njit(cache=True, nogil=True)
def anchored_starts(tokens, w, offsets, out):
    """Starts p of the windows tokens[p:p+w] that hold an anchor: a token t at p + r with
    bit r of offsets[t] set (tokens >= len(offsets) are no anchor). Writes them to out
    (unsorted, maybe repeated); returns how many, or -1 when more than len(out)."""
    n_off = len(offsets)
    last = len(tokens) - w
    cap = len(out)
    n = 0
    for j in range(len(tokens)):
        t = tokens[j]
        if t < n_off and offsets[t]:
            m = offsets[t]
            for r in range(w):
                if (m >> r) & 1:
                    p = j - r
                    if 0 <= p <= last:
                        if n == cap:
                            return -1
                        out[n] = p
                        n += 1
    return n
