"""Guards against tables that are wrong without an error: checks of a flat file's sample.

Each check looks at the blocks that the content checksum reads anyway (a flat
file's first and last 64 KiB and 64 blocks of 4 KiB between them: no extra read)
and returns one-line findings. `report` prints them as warnings, or raises the
first as an `InputError` with ``--strict``.

- bytes that look like text (a README copied to ``x.bin``);
- 32-bit reads of 16-bit data (values that are pairs of tokens) and the reverse
  (every other 16-bit value a high half near zero);
- a flat file read as one long document while a token looks like a separator;
- a separator that never occurs.
"""

from __future__ import annotations

import sys

import numpy as np

from fgram.pipeline.errors import InputError

LONG_DOCUMENT = 1 << 20  # tokens: one document longer than this is a missing --doc-sep
PAIRS = 1 << 20  # 32-bit token ids this large (5% of them) are pairs of 16-bit ones
# end-of-text ids of common tokenizers (GPT-2, cl100k, o200k, Llama 2, Llama 3, Qwen 2, OLMo)
KNOWN_SEPARATORS = (0, 1, 2, 50256, 100257, 199999, 128001, 151643, 50279)
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
    if doc_sep is None and n_items > LONG_DOCUMENT:
        candidates = list(dict.fromkeys([*KNOWN_SEPARATORS, int(values.max())]))
        seen = [(c, int((values == c).sum())) for c in candidates]
        seen = [(c, n) for c, n in seen if n][:3]
        hint = ""
        if seen:  # end-of-text ids of common tokenizers first, then the largest id
            named = ", ".join(f"{c} ({n}x)" for c, n in seen)
            hint = (
                f"; in a sample of {len(values)} tokens: {named}: if one of them separates "
                f"documents, pass --doc-sep ID"
            )
        found.append(f"{uri}: read as one document of {n_items} tokens (no --doc-sep){hint}")
    elif doc_sep is not None and not (values == doc_sep).any():
        whole = len(values) >= n_items
        found.append(
            f"{uri}: the separator {doc_sep} never occurs"
            if whole
            else f"{uri}: the separator {doc_sep} does not occur in a sample of "
            f"{len(values)} tokens; is --doc-sep right?"
        )
    return found


def report(findings: list[str], strict: bool) -> None:
    """Warn on stderr (one line each), or, with ``strict``, fail on the first."""
    if findings and strict:
        uri, _, problem = findings[0].partition(": ")
        raise InputError(uri, f"{problem} (--strict)")
    for line in findings:
        sys.stderr.write(f"fgram: warning: {line}\n")
