"""Guards against tables that are wrong without an error: checks of a flat file's sample.

Each check looks at the blocks that the content checksum reads anyway (a flat
file's first and last 64 KiB and 64 blocks of 4 KiB between them: no extra read)
and returns one-line findings. `report` prints them as warnings, or raises the
first as an `InputError` with ``--strict``.

- bytes that look like text (a README copied to ``x.bin``);
- 32-bit reads of 16-bit data (values that are pairs of tokens) and the reverse
  (every other 16-bit value a high half near zero);
- a flat file read without --doc-sep while an id recurs as document ends do (rare,
  never twice in a row, and an end-of-text id of a known tokenizer, or spaced apart
  unlike an ordinary token as frequent, or the largest id standing apart from the
  others), whatever the file's size; or read as one document of over 2^20 tokens;
- a separator that never occurs.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from fgram.pipeline.errors import InputError

LONG_DOCUMENT = 1 << 20  # tokens: one document longer than this is a missing --doc-sep
RECURS = 3  # occurrences in the sample before an id's recurrence says "separator"
SEPARATOR_SHARE = 0.02  # document ends are rare: at most this share of the tokens
PAIRS = 1 << 20  # 32-bit token ids this large (5% of them) are pairs of 16-bit ones
# end-of-text ids of common tokenizers (GPT-2, cl100k, o200k, Llama 2, Llama 3, Qwen 2, OLMo)
KNOWN_SEPARATORS = (0, 1, 2, 50256, 100257, 199999, 128001, 151643, 50279)
DEDICATED_SEPARATORS = (50256, 100257, 199999, 128001, 151643, 50279)  # never a word
SPACED_ALPHA = 0.01  # chance that an ordinary token's spacing is taken for documents'
PRINTABLE = np.zeros(256, bool)
PRINTABLE[[9, 10, 13]] = True
PRINTABLE[32:127] = True


def sample_items(
    blocks: list[tuple[int, bytes]], offset: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """(values, their item index in the file) of whole items inside the blocks (at, bytes)
    past the header of ``offset`` bytes."""
    size = dtype.itemsize
    vals, idx = [], []
    for at, data in blocks:
        lo = max(at, offset)
        lo += (-(lo - offset)) % size  # the first whole item
        n = (at + len(data) - lo) // size
        if n <= 0:
            continue
        vals.append(np.frombuffer(data, dtype, n, lo - at).astype(np.int64))
        idx.append(np.arange(n, dtype=np.int64) + (lo - offset) // size)
    if not vals:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    values, index = np.concatenate(vals), np.concatenate(idx)
    first = np.unique(index, return_index=True)[1]  # blocks may overlap (small files)
    return values[first], index[first]


def check_flat(
    uri: str,
    blocks: list[tuple[int, bytes]],
    offset: int,
    dtype: np.dtype,
    n_items: int,
    doc_sep: int | None,
) -> list[str]:
    """Findings (one line each, naming the file) about a flat file read as ``dtype`` with
    separator ``doc_sep``; [] when nothing looks wrong."""
    found = []
    raw = (
        np.concatenate([np.frombuffer(d, np.uint8)[max(offset - at, 0) :] for at, d in blocks])
        if blocks
        else np.zeros(0, np.uint8)
    )
    if len(raw) >= 64 and PRINTABLE[raw].mean() > 0.95:
        found.append(
            f"{uri}: looks like text, not token ids ({PRINTABLE[raw].mean():.0%} of "
            f"the bytes are printable); flat files hold raw token ids"
        )
        return found
    values, index = sample_items(blocks, offset, dtype)
    if len(values) < 16:
        return found
    if dtype.itemsize == 4 and (values >= PAIRS).mean() > 0.05:
        share = (values >= PAIRS).mean()
        found.append(
            f"{uri}: {share:.0%} of the values read as {dtype.name} exceed {PAIRS} (no "
            f"vocabulary is that large): they look like pairs of 16-bit tokens; wrong "
            f"--dtype? (try --dtype uint16)"
        )
        return found
    if dtype.itemsize == 2 and len(values) >= 64:
        small = values < 8
        odd, even = small[index % 2 == 1], small[index % 2 == 0]
        if len(odd) and len(even) and odd.mean() >= 0.95 and even.mean() <= 0.5:
            found.append(
                f"{uri}: every other 16-bit value is near zero: the file looks like "
                f"32-bit tokens; wrong --dtype? (try --dtype uint32)"
            )
            return found
    if doc_sep is None:
        line = _missing_separator(uri, values, index, n_items)
        if line:
            found.append(line)
    elif not (values == doc_sep).any():
        whole = len(values) >= n_items
        found.append(
            f"{uri}: the separator {doc_sep} never occurs"
            if whole
            else f"{uri}: the separator {doc_sep} does not occur in a sample of "
            f"{len(values)} tokens; is --doc-sep right?"
        )
    return found


def recurs_like_a_separator(values: np.ndarray, index: np.ndarray, c: int) -> bool:
    """Whether id ``c`` recurs in the sample as document ends do: at least `RECURS` times,
    rare (at most `SEPARATOR_SHARE` of the tokens) and never twice in a row."""
    at = index[values == c]
    return bool(
        len(at) >= RECURS
        and len(at) <= SEPARATOR_SHARE * len(values)
        and not (np.diff(np.sort(at)) == 1).any()
    )


def spaced_like_documents(values: np.ndarray, index: np.ndarray, c: int) -> bool:
    """Whether the occurrences of ``c`` keep apart as document ends do, unlike an ordinary
    token as frequent (`spacing_chance` under `SPACED_ALPHA`)."""
    return spacing_chance(values, index, c) <= SPACED_ALPHA


def spacing_chance(values: np.ndarray, index: np.ndarray, c: int) -> float:
    """How likely an ordinary token as frequent as ``c`` keeps as far apart as ``c`` does
    (small: spaced as document ends are): with p its share of the sample, an ordinary
    token recurs within the next r tokens with chance 1 - (1-p)^r (more, as words come
    in bursts), while documents shorter than g = 1/(8p), an eighth of the mean, are
    rare. Over the stretches the sample holds (r up to g, as far as the stretch goes),
    the Poisson tail of the near repeats seen; 1.0 when they are more than a quarter of
    those expected, or too few occurrences to tell."""
    order = np.argsort(index, kind="stable")
    idx, vals = index[order], values[order]
    run = np.concatenate([[0], np.cumsum(np.diff(idx) != 1)])  # contiguous stretches
    last = idx[np.append(np.flatnonzero(np.diff(run)), len(idx) - 1)][run]
    at = np.flatnonzero(vals == c)
    if len(at) < 2:
        return 1.0
    p = len(at) / len(vals)
    g = int(1 / (8 * p))
    if g < 2:
        return 1.0
    pos = idx[at]
    reach = np.minimum(g, last[at] - pos)  # tokens after it that the sample holds
    gap = np.append(np.diff(pos), g + 1)
    same = np.append(run[at][1:] == run[at][:-1], False)
    seen = int((same & (gap <= reach)).sum())
    expected = float((1 - (1 - p) ** reach).sum())
    if seen > expected / 4:
        return 1.0
    term = tail = math.exp(-expected)  # P(Poisson(expected) <= seen)
    for i in range(1, seen + 1):
        term *= expected / i
        tail += term
    return min(tail, 1.0)


def _stands_apart(values: np.ndarray) -> bool:
    """Whether the largest id is one apart from the ids below it, as an end-of-text id
    appended after a vocabulary is: more frequent than the 16 next largest together (in
    random or ordinary text the largest id is as rare as its neighbours)."""
    ids, counts = np.unique(values, return_counts=True)
    return len(ids) > 16 and bool(counts[-1] > counts[-17:-1].sum())


def _missing_separator(uri: str, values: np.ndarray, index: np.ndarray, n_items: int) -> str | None:
    """The finding for a flat file read without --doc-sep, whatever its size: an id that
    recurs like a separator (`recurs_like_a_separator`; the end-of-text ids of common
    tokenizers, then the largest id), or one document longer than `LONG_DOCUMENT`."""
    top = int(values.max())
    candidates = list(dict.fromkeys([*KNOWN_SEPARATORS, top]))
    like = [  # an end-of-text id recurring so; an id of everyday use (0, "!" in GPT-2)
        c  # also spaced apart as documents are; the largest id also standing apart
        for c in candidates
        if recurs_like_a_separator(values, index, c)
        and (
            c in DEDICATED_SEPARATORS
            or spaced_like_documents(values, index, c)
            or (c == top and _stands_apart(values))
        )
    ]
    if like:
        c, n = best_separator(values, index, like)
        others = [f"{o} ({int((values == o).sum())}x)" for o in like if o != c]
        also = f"; also recurring so, less evenly: {', '.join(others)}" if others else ""
        return (
            f"{uri}: read as one document of {n_items} tokens (no --doc-sep), but id {c} "
            f"recurs like a separator ({n}x in a sample of {len(values)} tokens, never "
            f"twice in a row{', spaced as documents are' if n > 1 else ''}): if it "
            f"separates documents, pass --doc-sep {c}{also}"
        )
    if n_items <= LONG_DOCUMENT:
        return None
    seen = [(c, int((values == c).sum())) for c in candidates]
    seen = [(c, n) for c, n in seen if n][:3]
    hint = ""
    if seen:  # end-of-text ids of common tokenizers first, then the largest id
        named = ", ".join(f"{c} ({n}x)" for c, n in seen)
        hint = (
            f"; in a sample of {len(values)} tokens: {named}: if one of them separates "
            f"documents, pass --doc-sep ID"
        )
    return f"{uri}: read as one document of {n_items} tokens (no --doc-sep){hint}"


def best_separator(values: np.ndarray, index: np.ndarray, like: list[int]) -> tuple[int, int]:
    """The candidate that behaves best as document ends, with its count in the sample:
    the one spaced most unlike an ordinary token (`spacing_chance`), then the most
    frequent (more ends seen is more evidence), then the first named."""
    scored = [
        (spacing_chance(values, index, c), -int((values == c).sum()), i, c)
        for i, c in enumerate(like)
    ]
    chance, minus_n, _, c = min(scored)
    return c, -minus_n


def report(findings: list[str], strict: bool) -> None:
    """Warn on stderr (one line each), or, with ``strict``, fail on the first."""
    if findings and strict:
        uri, _, problem = findings[0].partition(": ")
        raise InputError(uri, f"{problem} (--strict)")
    for line in findings:
        sys.stderr.write(f"fgram: warning: {line}\n")
