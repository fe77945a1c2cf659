"""fgram for Engram models (DeepSeek's hashed n-gram memory, public demo
`deepseek-ai/Engram`): canonical ("compressed") token ids and Engram's hash ids, exactly
as the demo computes them, in a compiled kernel for the data loader.

    from fgram.engram import EngramConfig, EngramHashing, canonical_map

    lookup, size = canonical_map("tokenizer/")          # ids -> canonical ids
    hashing = EngramHashing(EngramConfig.load("engram.toml"), lookup=(lookup, size))
    ids = hashing.hash(tokens)                          # {layer: int64 [B, T, (N-1)*H]}

The definitions (docs/formats.md, "Engram"): a token id's canonical id groups the ids
whose text, decoded alone, is equal after normalising; for each layer, ``max_ngram_size``
odd multipliers drawn from ``default_rng(seed + 10007 * layer)`` in ``[0, half)`` (``half
= max(1, (2^63 - 1) // canonical_size // 2)``), times 2 plus 1; per order n and head a
distinct prime table size, the next unused prime above the order's
``engram_vocab_size - 1`` (then above the head before), layers in turn; the bucket of
order n at position t is ``(x[t]*m0 ^ x[t-1]*m1 ^ ... ^ x[t-n+1]*m[n-1]) mod p`` in
wrapping int64 arithmetic, non-negative, with the canonical pad id before a sequence's
start. Negative ids (a loader's padding) are kept as they are.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fgram.pipeline.errors import ConfigError
from fgram.pipeline.kernels.jit import compiled
from fgram.pipeline.text.canonical import canonical_map, normalized

__all__ = [
    "EngramConfig",
    "EngramHashing",
    "canonical_map",
    "multipliers",
    "normalized",
    "table_sizes",
]

LAYER_STRIDE = 10007  # the demo's prime between the layers' seeds


@dataclass
class EngramConfig:
    """An Engram configuration, by the demo's field names (others in a file are ignored:
    ``n_embed_per_ngram``, ``kernel_size``, ``tokenizer_name_or_path``)."""

    engram_vocab_size: list[int] = field(default_factory=lambda: [129280 * 5, 129280 * 5])
    max_ngram_size: int = 3
    n_head_per_ngram: int = 8
    layer_ids: list[int] = field(default_factory=lambda: [1, 15])
    pad_id: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_ngram_size < 2:
            raise ConfigError(f"max_ngram_size must be >= 2, got {self.max_ngram_size}")
        if len(self.engram_vocab_size) < self.max_ngram_size - 1:
            raise ConfigError(
                f"engram_vocab_size: {len(self.engram_vocab_size)} sizes for orders "
                f"2..{self.max_ngram_size} (one per order)"
            )
        if self.n_head_per_ngram < 1 or any(v < 2 for v in self.engram_vocab_size):
            raise ConfigError("n_head_per_ngram must be >= 1 and every engram_vocab_size >= 2")

    @classmethod
    def load(cls, path: str) -> EngramConfig:
        """A TOML or JSON file with the demo's field names (top-level keys, or an
        ``[engram]`` table)."""
        with open(path, "rb") as fh:
            data = fh.read()
        if path.endswith(".json"):
            values = json.loads(data)
        else:
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # Python 3.10: the same module, from PyPI
                import tomli as tomllib
            values = tomllib.loads(data.decode())
        values = values.get("engram", values)
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def table_sizes(config: EngramConfig) -> dict[int, list[list[int]]]:
    """Each layer's prime table sizes, per order (2..max_n) and head: all distinct, each
    the next unused prime above the order's ``engram_vocab_size - 1`` or the head's
    before it, layers in turn."""
    seen: set[int] = set()
    out: dict[int, list[list[int]]] = {}
    for layer in config.layer_ids:
        orders = []
        for n in range(2, config.max_ngram_size + 1):
            start, heads = config.engram_vocab_size[n - 2] - 1, []
            for _ in range(config.n_head_per_ngram):
                p = start + 1
                while p in seen or not _is_prime(p):
                    p += 1
                seen.add(p)
                heads.append(p)
                start = p
            orders.append(heads)
        out[layer] = orders
    return out


def multipliers(config: EngramConfig, size: int) -> dict[int, np.ndarray]:
    """Each layer's ``max_ngram_size`` odd int64 multipliers for ``size`` canonical ids."""
    half = max(1, (np.iinfo(np.int64).max // size) // 2)
    out = {}
    for layer in config.layer_ids:
        rng = np.random.default_rng(int(config.seed + LAYER_STRIDE * int(layer)))
        r = rng.integers(low=0, high=half, size=(config.max_ngram_size,), dtype=np.int64)
        out[layer] = r * 2 + 1
    return out


# a bucket by a multiply with the prime's reciprocal where its quotient is off by at most
# one (|mix| / p < 2^51: p above 4096), corrected by one add or subtract; by division below
RECIPROCAL_ABOVE = 4096
_TILE = 64  # positions hashed per order before they are written out, heads interleaved


@compiled(cache=True, nogil=True, inline="always")
def near_bucket(v: int, p: int, inverse: float) -> int:  # pragma: no cover - compiled
    """``v mod p`` (non-negative) for p > `RECIPROCAL_ABOVE`, ``inverse`` = 1 / p: the
    quotient by a multiply (off by at most one), then one correction."""
    r = v - np.int64(math.floor(np.float64(v) * inverse)) * p
    r = r + p if r < 0 else r
    return r - p if r >= p else r


@compiled(cache=True, nogil=True, inline="always")
def _transpose_out(
    tile: np.ndarray, m: int, out: np.ndarray, t0: int
) -> None:  # pragma: no cover - compiled
    """out[t0 + i, c] = tile[c, i] for i < m: in 8 x 8 blocks (which the compiler turns
    into vector shuffles), the edges one by one."""
    width = tile.shape[0]
    mm, ww = m - m % 8, width - width % 8
    for i0 in range(0, mm, 8):
        for c0 in range(0, ww, 8):
            for ii in range(8):
                for cc in range(8):
                    out[t0 + i0 + ii, c0 + cc] = tile[c0 + cc, i0 + ii]
    for i in range(m):
        for c in range(ww, width):
            out[t0 + i, c] = tile[c, i]
    for i in range(mm, m):
        for c in range(ww):
            out[t0 + i, c] = tile[c, i]


@compiled(cache=True, nogil=True)
def _hash_ids(
    ids: np.ndarray,
    lookup: np.ndarray,
    pad: int,
    mult: np.ndarray,
    mods: np.ndarray,
    inverse: np.ndarray,
    heads: int,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """out[b, t, (n-2)*heads + j] = one layer's bucket of order n, head j at (b, t) of
    token ids ``ids`` [B, T] (canonical by ``lookup``, negative ones kept): ``mix mod p``
    non-negative; ``mult`` [max_n], ``mods`` and ``inverse`` = 1 / mods
    [(max_n - 1) * heads]."""
    nb, nt = ids.shape
    max_n = mult.shape[0]
    width = mods.shape[0]
    back = max_n - 1
    canon = np.empty(_TILE + back, np.int64)  # canonical ids from t0 - back
    mix = np.empty(_TILE, np.int64)
    tile = np.empty((width, _TILE), np.int64)
    for b in range(nb):
        for t0 in range(0, nt, _TILE):
            m = min(nt, t0 + _TILE) - t0
            for i in range(m + back):
                t = t0 - back + i
                if t < 0:
                    canon[i] = pad
                else:
                    v = np.int64(ids[b, t])
                    canon[i] = lookup[v] if v >= 0 else v
            for i in range(m):
                mix[i] = canon[back + i] * mult[0]
            for k in range(1, max_n):
                mk = mult[k]
                for i in range(m):
                    mix[i] = mix[i] ^ (canon[back - k + i] * mk)
                for j in range(heads):
                    c = (k - 1) * heads + j
                    p = mods[c]
                    if p > RECIPROCAL_ABOVE:
                        ip = inverse[c]
                        for i in range(m):
                            tile[c, i] = near_bucket(mix[i], p, ip)
                    else:
                        for i in range(m):
                            tile[c, i] = mix[i] % p
            _transpose_out(tile, m, out[b], t0)


class EngramHashing:
    """Engram's hash ids of token ids, bit-exact with the demo's `NgramHashMapping.hash`.
    ``lookup``: ``(canonical ids int64[vocab], size)`` (`canonical_map`), or
    ``tokenizer`` to make it."""

    def __init__(
        self,
        config: EngramConfig,
        tokenizer: Any = None,
        lookup: tuple[np.ndarray, int] | None = None,
    ) -> None:
        if lookup is None:
            if tokenizer is None:
                raise ConfigError("EngramHashing needs the tokenizer, or its canonical lookup")
            lookup = canonical_map(tokenizer)
        self.config = config
        self.lookup, self.size = np.asarray(lookup[0], np.int64), int(lookup[1])
        self.pad = int(self.lookup[config.pad_id])
        self.multipliers = multipliers(config, self.size)
        self.table_sizes = table_sizes(config)
        self._mods = {}  # each layer's table sizes, orders in turn, and their reciprocals
        for layer, orders in self.table_sizes.items():
            mods = np.asarray([p for order in orders for p in order], np.int64)
            self._mods[layer] = (mods, 1.0 / mods)

    def _checked(self, ids: Any) -> np.ndarray:
        x = np.asarray(ids)
        if x.dtype.kind not in "iu":
            raise ConfigError(f"token ids of dtype {x.dtype}: expected integers")
        if x.size and int(x.max()) >= len(self.lookup):
            raise ConfigError(
                f"token id {int(x.max())} is past the tokenizer's {len(self.lookup)} ids"
            )
        return x

    def canonical(self, ids: Any) -> np.ndarray:
        """Canonical ids of token ids (negative ones kept as they are)."""
        out = np.array(self._checked(ids), dtype=np.int64, order="C")
        keep = out >= 0
        out[keep] = self.lookup[out[keep]]
        return out

    def hash(self, ids: Any) -> dict[int, np.ndarray]:
        """``{layer: int64 [B, T, (max_ngram_size - 1) * n_head_per_ngram]}`` of token ids
        ``[B, T]`` (any integer dtype): orders in turn, heads in turn within one."""
        x = self._checked(ids)
        if x.ndim != 2:
            raise ConfigError(f"ids of shape {x.shape}: expected [batch, time]")
        heads = self.config.n_head_per_ngram
        out = {}
        for layer, (mods, inverse) in self._mods.items():
            # an array per layer: smaller ones stay under the allocator's mapping threshold
            # longer, and a fresh mapping's first touch costs more than the hash
            res = np.empty((x.shape[0], x.shape[1], len(mods)), np.int64)
            mult = self.multipliers[layer]
            _hash_ids(x, self.lookup, self.pad, mult, mods, inverse, heads, res)
            out[layer] = res
        return out
