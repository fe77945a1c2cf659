"""A unit's counted run, coded for the work folder: its distinct keys (ascending uint64)
and their counts, the two files a pass writes beside the packed order.

Raw, each distinct k-gram takes 12 bytes (an 8-byte key, a 4-byte count). Coded, the
run is cut into blocks of `BLOCK` entries; a block's first key is held in the run's
index, and each entry is a varint (LEB128, as `packing`) of its key's difference from
the one before (none for a block's first) and a varint of its count: neighbouring keys
of a unit share their high bits, and most counts in a unit are 1, so an entry takes
about 3-4 bytes. The index (a block's first key, where its bytes begin, its first
entry's number; one more row for the end) lets a merge task read only the blocks that
hold its key range (`run_blocks`), from a file of its own or a range of bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fgram.pipeline.kernels.jit import U8s, U32s, U64s, compiled

BLOCK = 1024  # entries a block: an index row (24 bytes) per 1,024 entries


@compiled(cache=True, inline="always")
def _size64(x: np.uint64) -> int:
    n = 1
    while x >= np.uint64(128):
        x >>= np.uint64(7)
        n += 1
    return n


@compiled(cache=True, inline="always")
def _put64(out: U8s, at: int, x: np.uint64) -> int:
    while x >= np.uint64(128):
        out[at] = np.uint8((x & np.uint64(127)) | np.uint64(128))
        x >>= np.uint64(7)
        at += 1
    out[at] = np.uint8(x)
    return at + 1


@compiled(cache=True, inline="always")
def _get64(data: U8s, at: int) -> tuple[np.uint64, int]:
    """The varint at ``data[at]`` and where the next begins (-1: cut short or too long)."""
    x, shift, at = np.uint64(0), 0, np.int64(at)
    while at < len(data) and shift < 64:
        b = data[at]
        at += 1
        x |= np.uint64(b & 127) << np.uint64(shift)
        shift += 7
        if b < 128:
            return x, at
    return x, np.int64(-1)


@compiled(cache=True, nogil=True)
def _coded_size(keys: U64s, counts: U32s, block: int) -> int:
    n = 0
    for i in range(len(keys)):
        if i % block:
            n += _size64(keys[i] - keys[i - 1])
        n += _size64(np.uint64(counts[i]))
    return n


@compiled(cache=True, nogil=True)
def _code_into(keys: U64s, counts: U32s, block: int, out: U8s, index: U64s) -> int:
    at = np.int64(0)
    for i in range(len(keys)):
        if i % block == 0:
            b = i // block
            index[3 * b] = keys[i]
            index[3 * b + 1] = at
            index[3 * b + 2] = i
        else:
            at = _put64(out, at, keys[i] - keys[i - 1])
        at = _put64(out, at, np.uint64(counts[i]))
    last = len(index) - 3
    index[last + 1] = at
    index[last + 2] = len(keys)
    return int(at)


@compiled(cache=True, nogil=True)
def _decode_into(data: U8s, index: U64s, ba: int, bb: int, keys: U64s, counts: U32s) -> int:
    """Entries of blocks [ba, bb) from their bytes ``data`` (from the first's start); how
    many, or -1 where the bytes are not the blocks the index says."""
    base = index[3 * ba + 1]
    e = 0
    for b in range(ba, bb):
        at = np.int64(index[3 * b + 1] - base)
        n = np.int64(index[3 * b + 5] - index[3 * b + 2])
        key = index[3 * b]
        for j in range(n):
            if j:
                d, at = _get64(data, at)
                if at < 0:
                    return -1
                key += d
            c, at = _get64(data, at)
            if at < 0 or c > np.uint64(0xFFFFFFFF):
                return -1
            keys[e] = key
            counts[e] = np.uint32(c)
            e += 1
        if at != np.int64(index[3 * b + 4] - base):
            return -1
    return e


def code_run(
    keys: np.ndarray, counts: np.ndarray, block: int = BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, index) of a run: ``keys`` ascending uint64, ``counts`` uint32 (>= 0), in
    blocks of ``block`` entries. The index is uint64 rows (first key, byte offset, first
    entry), one per block and one for the end: rows * 3 values, flat."""
    keys = np.ascontiguousarray(keys, np.uint64)
    counts = np.ascontiguousarray(counts, np.uint32)
    if len(keys) != len(counts):
        raise ValueError(f"{len(keys)} keys, {len(counts)} counts")
    blocks = -(-len(keys) // block)
    out = np.empty(_coded_size(keys, counts, block), np.uint8)
    index = np.zeros(3 * (blocks + 1), np.uint64)
    _code_into(keys, counts, block, out, index)
    return out, index


def run_entries(index: np.ndarray) -> int:
    return int(index[-1])


def run_blocks(index: np.ndarray, lo: int, hi: int | None) -> tuple[int, int]:
    """The blocks [ba, bb) that may hold keys in [lo, hi) (hi None: to the end)."""
    blocks = len(index) // 3 - 1
    first = index[0 : 3 * blocks : 3]
    ba = max(int(np.searchsorted(first, np.uint64(lo), side="right")) - 1, 0)
    bb = blocks if hi is None else int(np.searchsorted(first, np.uint64(hi), side="left"))
    return ba, max(bb, ba)


def byte_span(index: np.ndarray, ba: int, bb: int) -> tuple[int, int]:
    """Where blocks [ba, bb)'s bytes begin and end in the run's bytes."""
    return int(index[3 * ba + 1]), int(index[3 * bb + 1])


Run = tuple[U64s, U32s]  # (keys, counts)


def decode_blocks(data: np.ndarray, index: np.ndarray, ba: int, bb: int) -> Run:
    """(keys, counts) of blocks [ba, bb), from their bytes (`byte_span`)."""
    index = np.ascontiguousarray(index, np.uint64)
    n = int(index[3 * bb + 2] - index[3 * ba + 2]) if bb > ba else 0
    keys, counts = np.empty(n, np.uint64), np.empty(n, np.uint32)
    data = np.ascontiguousarray(data, np.uint8)
    start, end = byte_span(index, ba, bb)
    if len(data) != end - start or _decode_into(data, index, ba, bb, keys, counts) != n:
        raise ValueError(f"a coded run's blocks {ba}..{bb}: not the {end - start} bytes it said")
    return keys, counts


def decode_run(data: np.ndarray, index: np.ndarray) -> Run:
    """Every (keys, counts) of a coded run."""
    return decode_blocks(data, index, 0, len(index) // 3 - 1)


def run_slice(
    read: Callable[[int, int], np.ndarray], index: np.ndarray, lo: int, hi: int | None
) -> Run:
    """(keys, counts) of the run's keys in [lo, hi); ``read(start, end)`` gives a range of
    the run's bytes (a slice of a memory map, or a read of the file)."""
    ba, bb = run_blocks(index, lo, hi)
    if bb <= ba:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
    keys, counts = decode_blocks(read(*byte_span(index, ba, bb)), index, ba, bb)
    a = int(np.searchsorted(keys, np.uint64(lo)))
    b = len(keys) if hi is None else int(np.searchsorted(keys, np.uint64(hi)))
    return keys[a:b], counts[a:b]
