"""A range's raw token values as the uint32 stream the counting kernels read: documents
marked at separators (`separate`) or at the starts an index gives (`place`)."""

from __future__ import annotations

import numpy as np

from fgram.pipeline.kernels.jit import Array, I64s, U8s, U32s, compiled
from fgram.pipeline.kernels.keys import INVALID


@compiled(cache=True, nogil=True)
def separate(
    body: Array, sep: int, own: int, sep_before: bool, tokens: U32s
) -> tuple[int, int, int, int]:
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
        tokens[i] = INVALID if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        docs += prev & (1 - s)
        seps += s
        prev = s
    rest = np.int64(0)
    for i in range(m, n):
        v = np.int64(body[i])
        s = np.int64(v == sep)
        tokens[i] = INVALID if s else np.uint32(v)
        vmin = min(vmin, big if s else v)
        vmax = max(vmax, -big if s else v)
        rest += s
    if seps + rest == n:
        return docs, np.int64(0), np.int64(0), np.int64(-1)
    return docs, m - seps, vmin, vmax


@compiled(cache=True, nogil=True)
def place(body: Array, cuts: I64s, tokens: U32s) -> tuple[int, int]:
    """A range's raw values -> uint32 tokens with 2**32-1 inserted before each of the
    sorted positions ``cuts`` (documents that start there), in one pass; ``tokens``
    holds len(body) + len(cuts). Returns the min and max value (0, -1 when none)."""
    n = len(body)
    big = np.int64(1) << np.int64(62)
    vmin = big
    vmax = -big
    at = 0
    for c in range(len(cuts) + 1):
        stop = cuts[c] if c < len(cuts) else n
        first = at + c
        for i in range(at, stop):
            v = np.int64(body[i])
            tokens[first + i - at] = np.uint32(v)
            vmin = min(vmin, v)
            vmax = max(vmax, v)
        if c < len(cuts):
            tokens[stop + c] = INVALID
        at = stop
    if n == 0:
        return np.int64(0), np.int64(-1)
    return vmin, vmax


@compiled(cache=True, nogil=True)
def lists(values: Array, lengths: I64s, tokens: U32s) -> tuple[int, int]:
    """Documents given as their lengths and their concatenated values -> uint32 tokens
    with 2**32-1 after each document, in one pass; ``tokens`` holds len(values) +
    len(lengths). Returns the min and max value (0, -1 when none)."""
    big = np.int64(1) << np.int64(62)
    vmin = big
    vmax = -big
    at = 0
    out = 0
    for d in range(len(lengths)):
        for i in range(at, at + lengths[d]):
            v = np.int64(values[i])
            tokens[out] = np.uint32(v)
            vmin = min(vmin, v)
            vmax = max(vmax, v)
            out += 1
        tokens[out] = INVALID
        out += 1
        at += lengths[d]
    if at == 0:
        return np.int64(0), np.int64(-1)
    return vmin, vmax


@compiled(cache=True, nogil=True)
def with_separators(lengths: I64s, values: Array, sep: int, out: Array, at: int) -> int:
    """Documents given as their lengths and their concatenated values into ``out`` from
    ``at``, each followed by ``sep`` (a flat shard's layout, what `separate` reads), in one
    pass. Returns where the next document goes."""
    src = 0
    for d in range(len(lengths)):
        for _ in range(lengths[d]):
            out[at] = values[src]
            at += 1
            src += 1
        out[at] = sep
        at += 1
    return at


@compiled(cache=True, nogil=True)
def segments(buf: U8s, starts: I64s, sizes: I64s, out: U8s) -> int:
    """Copy the byte ranges [starts[i], starts[i] + sizes[i]) of ``buf`` one after the
    other into ``out`` (a sample file's token values, without the samples' other bytes).
    Returns the bytes copied."""
    at = 0
    for s in range(len(starts)):
        a = starts[s]
        out[at : at + sizes[s]] = buf[a : a + sizes[s]]
        at += sizes[s]
    return at


@compiled(cache=True, nogil=True)
def map_tokens(tokens: U32s, table: U32s) -> int:
    """Replace each token of a stream by ``table[token]`` in place (a canonical map),
    document boundaries (2**32-1) kept. Returns the largest id written (-1: none), or -2
    when a token has no entry in the table (ids of another vocabulary)."""
    n = table.shape[0]
    top = -1
    for i in range(tokens.shape[0]):
        t = tokens[i]
        if t == np.uint32(0xFFFFFFFF):
            continue
        if t >= n:
            return -2
        v = table[t]
        tokens[i] = v
        top = max(top, int(v))
    return top


@compiled(cache=True, nogil=True)
def positions_by_length(tokens: U32s, limit: int, max_len: int) -> I64s:
    """``out[n]`` = the positions before ``limit`` where an n-gram of a stream lies inside
    one document (its n tokens free of separators and in the stream), n = 1..max_len:
    the occurrences of all the stream's n-grams."""
    out = np.zeros(max_len + 1, np.int64)
    n = len(tokens)
    i = 0
    while i < n and i < limit:
        if tokens[i] == INVALID:
            i += 1
            continue
        s = i
        while i < n and tokens[i] != INVALID:
            i += 1
        for length in range(1, max_len + 1):
            hi = min(i - length + 1, limit)
            if hi > s:
                out[length] += hi - s
    return out
