"""A unit's candidate positions grouped by key (`counting.unit_table`'s ``order``), packed
for the next pass: the file a pass writes most of, per input token.

Raw, the order is an int32 per candidate and one per key (4.3 bytes per input token at
pass 2 of real code). Packed, it is a varint stream (LEB128: 7 bits a byte, the high bit
set on every byte but a number's last): the number of keys and of positions, then per
key its number of positions and those positions as ascending deltas, the first from 0.
A key's positions are near one another (a repeated phrase, an indented line), so most
deltas take one or two bytes: 1.9 bytes per input token there. Which of a key's
positions comes first does not matter to the next pass (`counting.ids_at` gives each the
key's value), so a key whose positions were not ascending is sorted first.
"""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import I32s, U8s, compiled
from fgram.pipeline.kernels.scratch import Scratch, work_array


@compiled(cache=True, inline="always")
def varint_bytes(x: int) -> int:
    """The bytes of ``x`` (>= 0) as a varint."""
    n = 1
    while x >= 128:
        x >>= 7
        n += 1
    return n


@compiled(cache=True, inline="always")
def put_varint(out: U8s, at: int, x: int) -> int:
    """Write ``x`` (>= 0) at ``out[at]``; where the next one goes."""
    if x < 128:  # most deltas: one byte, or two
        out[at] = np.uint8(x)
        return at + 1
    if x < 16384:
        out[at] = np.uint8((x & 127) | 128)
        out[at + 1] = np.uint8(x >> 7)
        return at + 2
    while x >= 128:
        out[at] = np.uint8((x & 127) | 128)
        x >>= 7
        at += 1
    out[at] = np.uint8(x)
    return at + 1


@compiled(cache=True, nogil=True)
def key_bytes(positions: I32s, a: int, b: int) -> int:
    """The bytes of one key's positions ``positions[a:b]`` as deltas; -1 where they are
    not ascending."""
    n, last = 0, 0
    for e in range(a, b):
        p = positions[e]
        if p < last:
            return -1
        n += varint_bytes(p - last)
        last = p
    return n


@compiled(cache=True, nogil=True)
def packed_size(positions: I32s, starts: I32s) -> int:
    """The bytes `pack_into` writes for this order; a key's positions that are not
    ascending are sorted first (in place)."""
    keys = len(starts) - 1
    n = varint_bytes(keys) + varint_bytes(len(positions))
    for r in range(keys):
        a, b = starts[r], starts[r + 1]
        m = key_bytes(positions, a, b)
        if m < 0:
            positions[a:b].sort()
            m = key_bytes(positions, a, b)
        n += varint_bytes(b - a) + m
    return n


@compiled(cache=True, nogil=True)
def pack_into(positions: I32s, starts: I32s, out: U8s) -> int:
    """Write the packed order into ``out`` (`packed_size` bytes); the bytes written."""
    keys = len(starts) - 1
    at = put_varint(out, 0, keys)
    at = put_varint(out, at, len(positions))
    for r in range(keys):
        at = put_varint(out, at, starts[r + 1] - starts[r])
        last = 0
        for e in range(starts[r], starts[r + 1]):
            at = put_varint(out, at, positions[e] - last)
            last = positions[e]
    return at


@compiled(cache=True, inline="always")
def get_varint(packed: U8s, at: int) -> tuple[int, int]:
    """The varint at ``packed[at]`` and where the next begins (-1: the bytes end first)."""
    x, shift = 0, 0
    while at < len(packed):
        b = packed[at]
        at += 1
        x |= (b & 127) << shift
        shift += 7
        if b < 128:
            return x, at
    return x, -1


@compiled(cache=True, nogil=True)
def unpack_into(packed: U8s, at: int, positions: I32s, starts: I32s) -> int:
    """Read the keys' sizes and positions that follow the header (from ``packed[at]``)
    into ``positions`` and ``starts``; where they end (-1: the bytes end before them, or
    they hold more positions than ``positions``)."""
    e = 0
    for r in range(len(starts) - 1):
        starts[r] = e
        size, at = get_varint(packed, at)
        if at < 0 or e + size > len(positions):
            return -1
        last = 0
        for _ in range(size):
            d, at = get_varint(packed, at)
            if at < 0:
                return -1
            last += d
            positions[e] = last
            e += 1
    starts[len(starts) - 1] = e
    return at


def pack_order(order: tuple[np.ndarray, np.ndarray], scratch: Scratch | None = None) -> np.ndarray:
    """``order`` (positions grouped by key, and where each key's start) as one uint8
    array (``scratch``'s ``packed_order`` buffer where given). A key's positions that
    are not ascending are sorted in place first."""
    positions, starts = (np.ascontiguousarray(a, np.int32) for a in order)
    out = work_array(scratch, "packed_order", packed_size(positions, starts), np.uint8)
    pack_into(positions, starts, out)
    return out


def _header(packed: np.ndarray) -> tuple[int, int, int]:
    """(keys, positions, where the keys' sizes begin) of a packed order."""
    keys, at = get_varint(packed, 0)
    n, at = get_varint(packed, at) if at >= 0 else (0, -1)
    if at < 0:
        raise ValueError(f"a packed order of {len(packed)} bytes has no header")
    return int(keys), int(n), int(at)


def unpack_order(
    packed: np.ndarray, scratch: Scratch | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The order `pack_order` packed: (positions, starts) as int32 (``scratch``'s
    ``prev_pos`` and ``prev_starts`` buffers where given)."""
    packed = np.ascontiguousarray(packed, np.uint8)
    keys, n, at = _header(packed)
    positions = work_array(scratch, "prev_pos", n, np.int32)
    starts = work_array(scratch, "prev_starts", keys + 1, np.int32)
    end = unpack_into(packed, at, positions, starts)
    if end != len(packed) or starts[keys] != n:
        raise ValueError(f"a packed order of {len(packed)} bytes ends at byte {end}")
    return positions, starts
