"""Counting kernels over token arrays: numpy, with the hot loops in `compiled` (numba).

Conventions
-----------
- A *token stream* is a ``uint32`` array; ``SENTINEL`` (2**32-1) marks a
  document boundary. Token ids are at most 2**31-1, so it never collides.
- An n-gram of length k is identified by an exact key, chained: the pair
  (id of its (k-1)-prefix, last token). For k = 2 the "id" of the 1-gram
  prefix is the token itself. Ids of (k-1)-grams are dense ranks in the
  frequent set of the previous pass (< 2**32-1).
- A pass packs its pairs into as few bits as they need (`KeyCode`: prefix
  bits + token bits), mixes them by a bijection of integers of that width,
  so they are spread uniformly, and stores them in the top bits of a uint64:
  sorted keys can be range-partitioned by their top bits into balanced
  ranges. No collisions: the mix is invertible. Narrow keys leave room for a
  position beside them in one uint64, which makes the counting sort exact.
- ``INVALID`` (2**32-1) in an id array means "no id here".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import compiled as cc

SENTINEL = np.uint32(0xFFFFFFFF)
INVALID = np.uint32(0xFFFFFFFF)
MAX_TOKEN = 2**31 - 1

_C = 0x9E3779B97F4A7C15
_C_INV = pow(_C, -1, 2**64)
_M = np.uint64(_C)


def mix(x: np.ndarray) -> np.ndarray:
    """A bijection on uint64 that spreads structured keys uniformly (`WIDE`'s mix).
    Returns a new array."""
    return WIDE.mix_raw(np.array(x, dtype=np.uint64))


def unmix(y: np.ndarray) -> np.ndarray:
    """Inverse of `mix`."""
    return WIDE.unmix_raw(np.asarray(y, dtype=np.uint64))


@dataclass(frozen=True)
class KeyCode:
    """How one pass turns (prefix id or first token, last token) into a uint64 key.

    raw = prefix << last_bits | last, ``bits`` = prefix_bits + last_bits <= 64;
    mixed by xorshift / multiply by an odd constant modulo 2**bits / xorshift
    (a bijection of bits-bit integers), then shifted to the top of the uint64.
    ``WIDE`` (32 + 32 bits) is `mix` of ``prefix << 32 | last``.
    """

    prefix_bits: int = 32
    last_bits: int = 32

    def __post_init__(self):
        if not (1 <= self.prefix_bits <= 32 and 1 <= self.last_bits <= 32 and self.bits >= 8):
            raise ValueError(f"bad key code {self}")

    @classmethod
    def fitting(cls, max_prefix: int, max_last: int) -> KeyCode:
        """The narrowest code for prefixes <= max_prefix and last tokens <= max_last."""
        pb, lb = max(int(max_prefix).bit_length(), 1), max(int(max_last).bit_length(), 1)
        return cls(max(pb, 8 - lb), lb)

    @property
    def bits(self) -> int:
        return self.prefix_bits + self.last_bits

    @property
    def up(self) -> int:
        return 64 - self.bits

    def args(self) -> tuple:
        """(last_bits, s1, s2, mask) as uint64: what the compiled kernels take."""
        b = self.bits
        return (
            np.uint64(self.last_bits),
            np.uint64(b // 2 - 1),
            np.uint64(max(b // 2 - 3, 1)),
            np.uint64((1 << b) - 1),
        )

    def mix_raw(self, x: np.ndarray) -> np.ndarray:
        """The bijection of bits-bit integers, in place on a uint64 array (returned)."""
        _, s1, s2, mask = self.args()
        x ^= x >> s1
        x *= _M
        x &= mask
        x ^= x >> s2
        return x

    def unmix_raw(self, y: np.ndarray) -> np.ndarray:
        """Inverse of `mix_raw` (a new array)."""
        _, s1, s2, mask = self.args()
        x = _unshift(y, int(s2), self.bits)
        x *= np.uint64(_C_INV) & mask
        x &= mask
        return _unshift(x, int(s1), self.bits)

    def encode(self, prefix, last) -> np.ndarray:
        vbits = np.uint64(self.last_bits)
        x = (np.asarray(prefix).astype(np.uint64) << vbits) | np.asarray(last).astype(np.uint64)
        return self.mix_raw(x) << np.uint64(self.up)

    def decode(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """Keys -> (prefix, last) as int64 arrays."""
        vbits = np.uint64(self.last_bits)
        x = self.unmix_raw(np.asarray(keys, dtype=np.uint64) >> np.uint64(self.up))
        return (x >> vbits).astype(np.int64), (x & ((np.uint64(1) << vbits) - np.uint64(1))).astype(
            np.int64
        )


def _unshift(y: np.ndarray, s: int, bits: int) -> np.ndarray:
    """Inverse of ``x ^= x >> s`` on bits-bit integers."""
    x = y.copy()
    while s < bits:
        x ^= x >> np.uint64(s)
        s *= 2
    return x


WIDE = KeyCode()


def ngram_keys(
    prev: np.ndarray, tokens: np.ndarray, k: int, code: KeyCode = WIDE
) -> tuple[np.ndarray, np.ndarray]:
    """Mixed keys of the candidate k-grams of one token stream.

    ``prev[i]`` is the id of the (k-1)-gram starting at i (for k = 2: the
    token itself), or INVALID/SENTINEL where there is none. A k-gram at i is
    a candidate iff both its (k-1)-prefix (at i) and (k-1)-suffix (at i+1)
    have ids; then it lies inside one document.

    Returns ``(positions, keys)`` in position order: int64 start positions and
    uint64 keys made by ``code``. (The numpy reference of what `unit_table`'s compiled
    kernels compute; the tests and the kernel benchmark use it.)
    """
    n_pos = len(tokens) - k + 1
    if n_pos <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    a = prev[:n_pos]
    ok = a != INVALID
    ok &= prev[1 : n_pos + 1] != INVALID
    pos = np.flatnonzero(ok)
    return pos, code.encode(a[pos], tokens[pos + (k - 1)])


def lookup_sorted(table: np.ndarray, sorted_queries: np.ndarray) -> np.ndarray:
    """Index of each (sorted) query in a sorted table, -1 where absent.

    Both sorted: one linear merge-join pass (compiled), no binary searches.
    """
    out = np.empty(len(sorted_queries), np.int64)
    cc.join_sorted(
        np.ascontiguousarray(table, np.uint64),
        np.ascontiguousarray(sorted_queries, np.uint64),
        0,
        -1,
        out,
    )
    return out


def ids_in(
    table: np.ndarray, sorted_queries: np.ndarray, offset: int = 0, out: np.ndarray | None = None
) -> np.ndarray:
    """uint32 ``offset`` + index of each (sorted) query in a sorted table, INVALID where
    absent (`lookup_sorted` with the id array made in the same pass). ``offset`` + the
    table's length must stay below INVALID. ``out``: where to write them."""
    if offset + len(table) >= int(INVALID):
        raise ValueError("ids past the uint32 id space")
    if out is None:
        out = np.empty(len(sorted_queries), np.uint32)
    cc.join_sorted(
        np.ascontiguousarray(table, np.uint64),
        np.ascontiguousarray(sorted_queries, np.uint64),
        offset,
        INVALID,
        out,
    )
    return out


class Scratch:
    """Grow-only work arrays reused by the calls of one process.

    Touching fresh memory costs page faults (in a VM, more than sorting the same
    bytes); a worker that counts unit after unit reuses
    the same pages instead. An array from `get` is valid until the next `get`
    of the same name.
    """

    def __init__(self):
        self._bufs: dict[str, np.ndarray] = {}

    def __getstate__(self):  # never ship the buffers (e.g. inside a pickled task)
        return {"_bufs": {}}

    def clear(self) -> None:
        self._bufs.clear()

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        need = max(n, 1) * dtype.itemsize
        buf = self._bufs.get(name)
        if buf is None or len(buf) < need:
            buf = self._bufs[name] = np.empty(need + need // 8, np.uint8)
        return buf[: n * dtype.itemsize].view(dtype)


def work_array(scratch: Scratch | None, name: str, n: int, dtype) -> np.ndarray:
    """``scratch``'s buffer ``name`` as n items of dtype, or a fresh array without one."""
    return np.empty(n, dtype) if scratch is None else scratch.get(name, n, dtype)


def _bucket_bounds(hist: np.ndarray) -> np.ndarray:
    """Where each bucket starts (and, last, where they all end), from their sizes."""
    bounds = np.zeros(len(hist) + 1, np.int64)
    np.cumsum(hist, out=bounds[1:])
    return bounds


def _sort_buckets(packed: np.ndarray, bstart: np.ndarray, bend: np.ndarray) -> None:
    """Sort each bucket ``packed[bstart[b]:bend[b]]`` in place: numpy's sort, one
    cache-sized slice at a time."""
    for b in np.flatnonzero(bend - bstart > 1):
        packed[bstart[b] : bend[b]].sort()


BUCKET = 1 << 16  # target candidates per bucket: its arrays stay in the core's cache
MAX_BUCKET_BITS = 12  # more buckets than 2**12: numpy's per-bucket sort calls cost too much
# Bucket sizes estimated from every SAMPLE-th position (a unit of SAMPLE_FROM positions
# or more), each bucket given room for its estimate + 6 standard deviations: the
# exact count was a pass over every position before the scatter's own.
# A bucket that fills up anyway (e.g. a corpus periodic in SAMPLE) is counted exactly.
SAMPLE = 32
SAMPLE_FROM = 1 << 20


def unit_table(
    prev: np.ndarray,
    tokens: np.ndarray,
    k: int,
    limit: int,
    want_order: bool,
    code: KeyCode = WIDE,
    bucket: int = BUCKET,
    min_lo_bits: int = 1,
    exact: bool = True,
    scratch: Scratch | None = None,
    sample: int = SAMPLE,
    sample_from: int = SAMPLE_FROM,
):
    """Count the candidate k-grams of one unit of work.

    ``prev``/``tokens`` as for `ngram_keys`, keys made by ``code``. Only
    k-grams starting before ``limit`` belong to this unit (the rest are the
    overlap that a flat-file range reads past its end, needed only for their
    ids). Compiled kernels (`compiled`): the candidates are radix-partitioned
    by the top bits of their (uniformly mixed) keys into cache-sized buckets,
    each bucket sorted by numpy, and the runs read off in bucket order, which
    is key order. When a key's bits below the bucket bits and a position fit
    one uint64 together (``exact``: e.g. every pass of a 16-bit vocabulary),
    the sort orders the candidates completely and the runs are one
    sequential pass; otherwise a bucket sorts (top key bits, index) pairs and
    the runs check the full keys.

    Returns ``(keys, counts, order, counted)``: the unit's distinct keys
    (sorted; the overlap included with count 0) and their counts; if asked,
    ``order = (positions, starts)``: the candidates' positions (both int32) grouped
    by key in key order, key r's being ``positions[starts[r]:starts[r+1]]``
    (`ids_at` turns it and per-key values into a per-position array).

    With a ``scratch``, the work arrays and the returned ones are its
    buffers (valid until the next call with it); counts are uint32.
    ``bucket`` (candidates per bucket), ``min_lo_bits`` (packed index bits:
    more bits, more keys whose remaining top bits tie), ``exact=False``
    (force the indirect path), ``sample`` (0: no estimated bucket sizes) and
    ``sample_from`` exist for the tests.
    """
    n_pos = max(len(tokens) - k + 1, 0)
    if n_pos >= 2**31:
        raise ValueError("a unit holds at most 2**31-1 positions")
    prev = np.ascontiguousarray(prev, dtype=np.uint32)
    tokens = np.ascontiguousarray(tokens, dtype=np.uint32)
    args = code.args()
    bits = max(1, int(np.ceil(np.log2(max(n_pos, 1) / bucket))))  # buckets: the top bits
    pos_bits = max(int(n_pos - 1).bit_length(), 1)
    exact = exact and code.bits + pos_bits - 64 <= max(bits, MAX_BUCKET_BITS)
    if exact:
        bits = max(bits, code.bits + pos_bits - 64)
    bits = min(bits, code.bits)
    shift = np.uint64(code.bits - bits)
    bstart: np.ndarray | None = None
    bend: np.ndarray | None = None
    ends = np.empty(1 << bits, np.int64)
    if exact and sample and n_pos >= sample_from:
        est = np.zeros(1 << bits, np.int64)
        cc.candidate_histogram(prev, tokens, k, n_pos, args, shift, sample, est)
        room = est * sample + (6 * sample * np.sqrt(est + 1)).astype(np.int64) + 4 * sample
        bounds = _bucket_bounds(room)
        packed = work_array(scratch, "packed", int(bounds[-1]), np.uint64)
        if cc.scatter_exact(
            prev, tokens, k, n_pos, args, shift, np.uint64(pos_bits), bounds, packed, ends
        ):
            bstart, bend = bounds[:-1], ends
    if bstart is None:
        hist = np.zeros(1 << bits, np.int64)
        cc.candidate_histogram(prev, tokens, k, n_pos, args, shift, 1, hist)
        bounds = _bucket_bounds(hist)
        bstart, bend = bounds[:-1], bounds[1:]
        packed = work_array(scratch, "packed", int(bounds[-1]), np.uint64)
        if exact:
            cc.scatter_exact(
                prev, tokens, k, n_pos, args, shift, np.uint64(pos_bits), bounds, packed, ends
            )
        else:
            lo_bits = max(min_lo_bits, int(hist.max(initial=1) - 1).bit_length())
            keys = work_array(scratch, "keys", len(packed), np.uint64)
            where = work_array(scratch, "where", len(packed), np.int32)
            cc.scatter_buckets(
                prev,
                tokens,
                k,
                n_pos,
                args,
                shift,
                np.uint64(code.up),
                bounds,
                lo_bits,
                keys,
                where,
                packed,
            )
    assert bstart is not None and bend is not None  # both set on every path above
    n = int((bend - bstart).sum())
    _sort_buckets(packed, bstart, bend)
    # untouched tails of these are never resident: no copies of the used heads
    uniq = work_array(scratch, "uniq", n, np.uint64)
    counts = work_array(scratch, "counts", n, np.uint32)
    starts = work_array(scratch, "starts", n + 1, np.int32)  # n < 2**31
    order = work_array(scratch, "order", n, np.int32)
    if exact:
        u = cc.exact_runs(
            packed,
            bstart,
            bend,
            shift,
            np.uint64(pos_bits),
            np.uint64(code.up),
            limit,
            uniq,
            counts,
            starts,
            order,
        )
        counted = int(counts[:u].sum())
    else:
        u = cc.bucket_runs(packed, keys, where, bounds, lo_bits, limit, uniq, counts, starts, order)
        counted = int(np.count_nonzero(where < limit))
    result = (order, starts[: u + 1]) if want_order else None
    return uniq[:u], counts[:u], result, counted


def ids_at(
    values: np.ndarray, order: tuple[np.ndarray, np.ndarray], n: int, scratch: Scratch | None = None
) -> np.ndarray:
    """Per-position uint32 array of length n: ``values[r]`` at key r's positions, INVALID
    elsewhere."""
    positions, starts = order
    out = work_array(scratch, "ids", n, np.uint32)
    out.fill(INVALID)
    cc.spread(np.ascontiguousarray(values, np.uint32), starts, positions, out)
    return out


def merge_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Merge sorted runs of distinct keys into one sorted table with summed counts.

    Pairwise, in a balanced tree of linear merges (compiled): every level is
    one sequential pass, log2(runs) levels.
    """
    runs = [
        (np.ascontiguousarray(k, np.uint64), np.ascontiguousarray(c, np.int64))
        for k, c in parts
        if len(k)
    ]
    if not runs:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    while len(runs) > 1:
        merged = []
        for i in range(0, len(runs) - 1, 2):
            (ka, ca), (kb, cb) = runs[i], runs[i + 1]
            ko = np.empty(len(ka) + len(kb), np.uint64)
            co = np.empty(len(ko), np.int64)
            m = cc.merge_two(ka, ca, kb, cb, ko, co)
            merged.append((ko[:m], co[:m]))
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    keys, counts = runs[0]
    if keys is parts[0][0] or keys.base is parts[0][0]:  # a single input run: a private copy
        keys, counts = keys.copy(), counts.copy()
    return keys, counts


def merge_counts_bucketed(
    parts: list[tuple[np.ndarray, np.ndarray]],
    code: KeyCode,
    lo: int,
    hi: int,
    bucket: int = BUCKET,
    scratch: Scratch | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`merge_counts` of runs whose keys (made by ``code``) lie in [lo, hi), by
    one exact sort instead of pairwise merges: every (key, count) entry becomes
    one uint64 (the key's bits below a bucket's + a 32-bit count), scattered
    into cache-sized buckets of the range, each sorted by numpy, equal keys
    summed in one pass. Falls back to `merge_counts` when a key's remaining
    bits and a count do not fit one uint64 (wide codes). ``hi`` = 2**64 for
    the last range. Counts must be < 2**32 (a unit's are)."""
    runs = [(np.ascontiguousarray(k, np.uint64), c) for k, c in parts if len(k)]
    m = sum(len(k) for k, _ in runs)
    if m == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    span_bits = max(int(hi - lo - 1).bit_length(), 1)  # the range: 2**span_bits wide at most
    want = max(int(np.ceil(np.log2(max(m / bucket, 1)))), 1)  # buckets in the range
    top_bits = min(64 - span_bits + want, code.bits)  # bucket = key >> (64 - top_bits)
    rest_bits = code.bits - top_bits
    if rest_bits > 32:
        return merge_counts(parts)
    top_shift = 64 - top_bits
    base = lo >> top_shift
    nb = ((hi - 1) >> top_shift) - base + 1
    edges = (np.arange(1, nb, dtype=np.uint64) + np.uint64(base)) << np.uint64(top_shift)
    hist = np.zeros(nb, np.int64)
    for keys, _ in runs:  # sorted runs: bucket sizes from their boundaries
        hist += np.diff(np.searchsorted(keys, edges), prepend=0, append=len(keys))
    bounds = _bucket_bounds(hist)
    packed = work_array(scratch, "merge_packed", m, np.uint64)
    cursor = bounds[:-1].copy()
    rest_mask = np.uint64((1 << rest_bits) - 1)
    for keys, counts in runs:
        cc.scatter_counted(
            keys,
            np.ascontiguousarray(counts, np.uint32),
            np.uint64(code.up),
            np.uint64(top_shift),
            base,
            rest_mask,
            cursor,
            packed,
        )
    _sort_buckets(packed, bounds[:-1], bounds[1:])
    out_keys = work_array(scratch, "merge_keys", m, np.uint64)
    out_counts = work_array(scratch, "merge_counts", m, np.int64)
    u = cc.counted_runs(
        packed, bounds, base, np.uint64(rest_bits), np.uint64(code.up), out_keys, out_counts
    )
    return out_keys[:u], out_counts[:u]


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


def part_bounds(nparts: int) -> np.ndarray:
    """Boundaries of `nparts` equal ranges of the mixed-key space (uint64, len nparts+1;
    the end, 2**64, is implied)."""
    edges = [(i * (2**64)) // nparts for i in range(nparts)]
    return np.array(edges, dtype=np.uint64)


def part_range(nparts: int, p: int) -> tuple[int, int | None]:
    """Key range p of `part_bounds(nparts)`: [lo, hi) as ints, hi None for the last."""
    bounds = part_bounds(nparts)
    return int(bounds[p]), (int(bounds[p + 1]) if p + 1 < nparts else None)


def key_slice(keys: np.ndarray, lo: int, hi: int | None) -> tuple[int, int]:
    """Index bounds [a, b) of the keys of a sorted array in [lo, hi) (hi None: to the end)."""
    a = int(np.searchsorted(keys, np.uint64(lo)))
    b = len(keys) if hi is None else int(np.searchsorted(keys, np.uint64(hi)))
    return a, b


def warm_up() -> None:
    """Run every compiled counting kernel once on tiny data.

    The first call of a kernel compiles it (~2 s for all of them) and caches
    the machine code on disk; calling this in the driver before tasks start
    means the worker processes of this machine load it instead of each
    compiling it at once.
    """
    for dtype in (np.uint16, np.uint32):  # the common flat-file dtypes
        cc.separate(np.array([1, 0, 2], dtype), 0, 3, True, np.empty(3, np.uint32))
    tokens = np.array([1, 2, 1, 2, SENTINEL, 3, 2, 1, SENTINEL], np.uint32)  # two documents
    for exact in (True, False):
        uniq, _, order, _ = unit_table(tokens, tokens, 2, len(tokens) - 1, True, exact=exact)
        ids = ids_at(np.arange(len(uniq)), order, len(tokens))
        uniq3, counts3, _, _ = unit_table(ids, tokens, 3, len(tokens), False, exact=exact)
    lookup_sorted(uniq3, uniq3)
    ids_in(uniq3, uniq3, 1)
    merge_counts([(uniq3, counts3), (uniq3[:1], counts3[:1])])
    code = KeyCode(16, 16)
    keys = np.sort(code.encode(np.arange(5), np.arange(5)))
    merge_counts_bucketed([(keys, np.ones(5, np.uint32))], code, 0, 2**64)
