"""Deterministic numpy f-gram models (factories for ``fgram embed --model``).

- ``fgram.pipeline.models:echo``: row = (tokens..., length) as floats: the
  output encodes the input, so tests can check every row landed at its id.
- ``fgram.pipeline.models:hashed``: a fast deterministic model of width 256
  (a sum of fixed random vectors per (position, token) bucket): for filling
  large tables in benchmarks; ``hashed_2048``: the same, width 2048 (the
  paper's 4 KB float16 rows).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Model = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (tokens [B, K], lengths [B]) -> [B, d]


def echo() -> Model:
    def model(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return np.concatenate([tokens, lengths[:, None]], axis=1).astype(np.float32)

    return model


def hashed(dim: int = 256, buckets: int = 4096, seed: int = 0) -> Model:
    table = np.random.default_rng(seed).standard_normal((buckets, dim)).astype(np.float32)

    def model(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        out = np.zeros((len(tokens), dim), dtype=np.float32)
        for j in range(tokens.shape[1]):
            live = j < lengths
            out[live] += table[(tokens[live, j].astype(np.int64) * (2 * j + 1)) % buckets]
        rows: np.ndarray = out / np.sqrt(np.maximum(lengths, 1))[:, None].astype(np.float32)
        return rows

    return model


def hashed_2048() -> Model:
    return hashed(dim=2048)
