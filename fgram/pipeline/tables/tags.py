"""Read tags written by `fgram annotate` as fixed-length training sequences (numpy only).

    for tokens, fgram_ids, match_len in training_sequences("TAGS", seq_len=2048):
        ...   # int64 [seq_len], int64 [seq_len], uint8 [seq_len]

The shards are read in order as one stream (Parquet documents back to back,
flat files as they are) and cut into consecutive windows of ``seq_len``. A
match that would reach before the start of its window is truncated: the
position gets the longest f-gram that ends there and starts inside the window
(its suffix, which the table holds), so a model never sees context from the
previous sequence.

TAGS may be a local folder or a URI (``s3://...``, with ``storage`` options): Parquet
tags are read from the store; a flat shard's ``.npy`` tags are copied once into the
local cache (`cache.immutable_copy`: an object-store output's files have names of
their own generation, never rewritten) and memory-mapped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from fgram.pipeline.errors import FgramError
from fgram.pipeline.formats.reading import Shard, Unit
from fgram.pipeline.formats.registry import format_of
from fgram.pipeline.io.publish import MANIFEST, SUCCESS, generation_name
from fgram.pipeline.io.storage import Location, Place, locate
from fgram.pipeline.tables.index import FgramIndex
from fgram.pipeline.tables.versions import manifest_fingerprint


def open_tags(
    tags: Place, table: str | None = None, storage: dict[str, Any] | None = None
) -> tuple[Location, dict[str, Any], FgramIndex]:
    """The tags' location, their manifest and the index of their table; refuses stale
    tags."""
    loc = tags if isinstance(tags, Location) else locate(str(tags), storage)
    if not loc.child(SUCCESS).exists() or not loc.child(MANIFEST).exists():
        raise FgramError(f"{loc.uri}: not a finished fgram annotate output")
    manifest = loc.child(MANIFEST).read_json()
    table = table or manifest["table"]["path"]
    if manifest_fingerprint(locate(table, storage)) != manifest["table"]["fingerprint"]:
        raise FgramError(
            f"{loc.uri}: tags were made with another f-gram table than {table} "
            "(stale); annotate again"
        )
    return loc, manifest, FgramIndex.open(table, storage=storage)


def tag_file(loc: Location, manifest: dict[str, Any], rel: str) -> Location:
    """Where the tags file ``rel`` (``tags/<name>...``) is: on an object store under the
    name of its output's generation (`publish.finish`)."""
    files = manifest.get("files")
    if files is None or rel in files or "generation" not in manifest:
        return loc.child(rel)
    return loc.child(generation_name(rel, manifest["generation"]))


def _streams(
    loc: Location, manifest: dict[str, Any], storage: dict[str, Any] | None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    column = manifest["config"]["column"]
    shards = [Shard(**rec) for rec in manifest["inputs"]]
    for u in manifest["units"]:
        unit = Unit(u["shard"], u["start"], u["stop"])
        shard = shards[unit.shard]
        yield format_of(shard).read_tags(
            shard, unit, column, storage, lambda rel: tag_file(loc, manifest, rel)
        )


def truncate(
    index: FgramIndex, tokens: np.ndarray, fid: np.ndarray, mlen: np.ndarray, seq_len: int
) -> None:
    """In place: windows of seq_len over the arrays; cut matches at each window's start."""
    n = len(tokens) // seq_len
    head = min(index.max_len - 1, seq_len)
    if n == 0 or head < 1:
        return
    cols = np.arange(head)
    pos = (np.arange(n) * seq_len)[:, None] + cols[None, :]  # [n, head] positions
    bad = mlen[pos] > cols[None, :] + 1
    if not bad.any():
        return
    flat_pos = pos.ravel()
    hf, hl = index.match(tokens[flat_pos], doc_starts=np.arange(n) * head)
    fix = flat_pos[bad.ravel()]
    fid[fix] = hf[bad.ravel()]
    mlen[fix] = hl[bad.ravel()]


def training_sequences(
    tags: Place,
    seq_len: int,
    table: str | None = None,
    drop_last: bool = True,
    storage: dict[str, Any] | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield (tokens, fgram_ids, match_len) arrays of length seq_len, in stream order.
    ``tags``: a folder or a URI; ``storage``: storage options for it, its table and its
    inputs (else the environment's)."""
    if seq_len < 1:
        raise FgramError(f"seq_len must be >= 1, got {seq_len}")
    loc, manifest, index = open_tags(tags, table, storage)
    buf_t, buf_f, buf_m = [], [], []
    have = 0
    for tokens, fid, mlen in _streams(loc, manifest, storage):
        buf_t.append(tokens)
        buf_f.append(np.array(fid, dtype=np.int64))
        buf_m.append(np.array(mlen, dtype=np.uint8))
        have += len(tokens)
        if have < seq_len:
            continue
        t, f, m = np.concatenate(buf_t), np.concatenate(buf_f), np.concatenate(buf_m)
        full = (len(t) // seq_len) * seq_len
        truncate(index, t[:full], f[:full], m[:full], seq_len)
        for s in range(0, full, seq_len):
            yield t[s : s + seq_len], f[s : s + seq_len], m[s : s + seq_len]
        buf_t, buf_f, buf_m = [t[full:]], [f[full:]], [m[full:]]
        have = len(t) - full
    if have and not drop_last:
        t, f, m = np.concatenate(buf_t), np.concatenate(buf_f), np.concatenate(buf_m)
        truncate(index, t, f, m, len(t))
        yield t, f, m
