"""The key code: how an n-gram becomes one uint64, in numpy and in numba (one definition).

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
- ``INVALID`` (2**32-1) in an id array means "no id here"; ``EMPTY`` (2**64-1)
  marks a free slot of a hash table of keys.

The compiled (numba) kernels of every module are plain functions of numpy
arrays, compiled on first use and cached on disk (``cache=True``), so a worker
process pays the compile once; each has a brute-force oracle in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fgram.pipeline.kernels.jit import compiled

SENTINEL = np.uint32(0xFFFFFFFF)  # a document boundary in a token stream
INVALID = np.uint32(0xFFFFFFFF)  # "no id here" in an id array
MAX_TOKEN = 2**31 - 1
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # a free slot of a hash table of keys

C = 0x9E3779B97F4A7C15  # the odd multiplier of every mix ...
C_INV = pow(C, -1, 2**64)  # ... and its inverse modulo 2**64
MULT = np.uint64(C)


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

    def __post_init__(self) -> None:
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

    def args(self) -> tuple[np.uint64, np.uint64, np.uint64, np.uint64]:
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
        x *= MULT
        x &= mask
        x ^= x >> s2
        return x

    def unmix_raw(self, y: np.ndarray) -> np.ndarray:
        """Inverse of `mix_raw` (a new array)."""
        _, s1, s2, mask = self.args()
        x = _unshift(y, int(s2), self.bits)
        x *= np.uint64(C_INV) & mask
        x &= mask
        return _unshift(x, int(s1), self.bits)

    def encode(self, prefix: ArrayLike, last: ArrayLike) -> np.ndarray:
        vbits = np.uint64(self.last_bits)
        x = (np.asarray(prefix).astype(np.uint64) << vbits) | np.asarray(last).astype(np.uint64)
        keys: np.ndarray = self.mix_raw(x) << np.uint64(self.up)
        return keys

    def decode(self, keys: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Keys -> (prefix, last) as int64 arrays."""
        vbits = np.uint64(self.last_bits)
        x = self.unmix_raw(np.asarray(keys, dtype=np.uint64) >> np.uint64(self.up))
        return (x >> vbits).astype(np.int64), (x & ((np.uint64(1) << vbits) - np.uint64(1))).astype(
            np.int64
        )


def _unshift(y: np.ndarray, s: int, bits: int) -> np.ndarray:
    """Inverse of ``x ^= x >> s`` on bits-bit integers."""
    x: np.ndarray = y.copy()
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


@compiled(cache=True, inline="always")
def mix1(x: np.uint64) -> np.uint64:
    """`mix` of one uint64."""
    x ^= x >> np.uint64(31)
    x *= MULT
    x ^= x >> np.uint64(29)
    return x


@compiled(cache=True, inline="always")
def chain_key1(prefix: int, last: int) -> np.uint64:
    """The mixed key of (prefix id or first token, last token): `index.chain_key` of one."""
    return mix1((np.uint64(prefix) << np.uint64(32)) | np.uint64(last))


@compiled(cache=True, inline="always")
def code_key1(prefix: int, last: int, code: tuple[np.uint64, ...]) -> np.uint64:
    """`KeyCode.encode` of one (prefix, last), before the shift to the top bits.

    ``code`` = (last_bits, s1, s2, mask): the raw key ``prefix << last_bits |
    last`` mixed by a bijection of ``bits``-bit integers (xorshift, multiply by
    an odd constant modulo 2**bits, xorshift).
    """
    vbits, s1, s2, mask = code
    x = (np.uint64(prefix) << vbits) | np.uint64(last)
    x ^= x >> s1
    x = (x * MULT) & mask
    key: np.uint64 = x ^ (x >> s2)
    return key
