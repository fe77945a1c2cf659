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

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from fgram.pipeline.errors import FgramError
from fgram.pipeline.formats.layouts import LAYOUTS
from fgram.pipeline.formats.reading import Shard, Unit
from fgram.pipeline.formats.registry import format_of
from fgram.pipeline.io.publish import MANIFEST, SUCCESS, as_location, generation_name
from fgram.pipeline.io.storage import Location, locate
from fgram.pipeline.tables.index import FgramIndex
from fgram.pipeline.tables.versions import manifest_fingerprint


def open_tags(
    tags: str | Location, table: str | None = None, storage: dict[str, Any] | None = None
) -> tuple[Location, dict[str, Any], FgramIndex]:
    """The tags' location, their manifest and the index of their table; refuses stale
    tags."""
    loc = as_location(tags, storage)
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


class FgramTags:
    """An annotate output read at any offset: its shards in order as one stream of
    ``len(tags)`` positions (Parquet documents back to back, flat files as they are).

        tags = FgramTags.open("TAGS")
        tokens, fgram_ids, match_len = tags.window(offset, 2048)
        T, F, M = tags.windows(offsets, 2048)  # [n, 2048] each

    A window's matches are cut at its start exactly as `training_sequences` cuts them.
    Flat tags (and their tokens) are read by the window's range (memory-mapped
    locally, one cached copy from a store); other formats' tags a unit at a time,
    the last few kept (``cache`` units)."""

    def __init__(
        self,
        loc: Location,
        manifest: dict[str, Any],
        index: FgramIndex,
        storage: dict[str, Any] | None,
        cache: int = 2,
    ) -> None:
        self.loc, self.manifest, self.index, self.storage = loc, manifest, index, storage
        self.column = manifest["config"]["column"]
        self.layout = LAYOUTS[manifest["config"].get("layout", "fgram")]
        self.shards = [Shard(**rec) for rec in manifest["inputs"]]
        self.units = [Unit(u["shard"], u["start"], u["stop"]) for u in manifest["units"]]
        sizes = [u.get("tokens") for u in manifest["units"]]
        if any(n is None for n in sizes):  # an older annotate's: each unit read once
            sizes = [len(self.unit(i)[0]) for i in range(len(self.units))]
        self.starts = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
        self._cached: OrderedDict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._keep = max(cache, 1)
        self._maps: dict[int, tuple[np.ndarray | None, np.ndarray, np.ndarray]] = {}

    @classmethod
    def open(
        cls, tags: str | Location, table: str | None = None, storage: dict[str, Any] | None = None
    ) -> FgramTags:
        """Open a finished annotate output (refused when its table changed since)."""
        return cls(*open_tags(tags, table, storage), storage)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _where(self, rel: str) -> Location:
        return tag_file(self.loc, self.manifest, rel)

    def unit(self, i: int, keep: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit i's (tokens, fgram ids, match lengths), as written (matches uncut; not to
        be changed); ``keep``: among the units kept for the next windows."""
        if i in self._cached:
            self._cached.move_to_end(i)
            return self._cached[i]
        unit = self.units[i]
        shard = self.shards[unit.shard]
        tags = format_of(shard).tags
        t, f, m = tags.read(shard, unit, self.column, self.storage, self._where, self.layout)
        got = (np.asarray(t, np.int64), np.asarray(f, np.int64), np.asarray(m, np.uint8))
        if not keep:
            return got
        self._cached[i] = got
        while len(self._cached) > self._keep:
            self._cached.popitem(last=False)
        return got

    def _span(self, i: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions [a, b) of unit i."""
        unit = self.units[i]
        shard = self.shards[unit.shard]
        tags = format_of(shard).tags
        if tags.by_range:
            if unit.shard not in self._maps:
                self._maps[unit.shard] = tags.maps(shard, self.storage, self._where, self.layout)
            tokens, fid, mlen = self._maps[unit.shard]
            lo, hi = unit.start + a, unit.start + b
            if tokens is None:  # on an object store: the range read
                t, _, _ = tags.read_range(shard, unit, a, b, self.storage, self._where, self.layout)
            else:
                t = tokens[lo:hi]
            return np.asarray(t, np.int64), np.asarray(fid[lo:hi], np.int64), np.array(mlen[lo:hi])
        t, f, m = self.unit(i)
        return t[a:b], f[a:b], m[a:b]

    def _raw(self, offset: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if offset < 0 or length < 1 or offset + length > len(self):
            raise FgramError(
                f"window [{offset}, {offset + length}) is outside the tags' {len(self)} positions"
            )
        first = int(np.searchsorted(self.starts, offset, "right")) - 1
        parts, at = [], offset
        for i in range(first, len(self.units)):
            if at >= offset + length:
                break
            lo, hi = int(self.starts[i]), int(self.starts[i + 1])
            if hi > at:
                parts.append(self._span(i, at - lo, min(offset + length, hi) - lo))
                at = min(offset + length, hi)
        return tuple(np.concatenate(x) for x in zip(*parts, strict=True))  # type: ignore[return-value]

    def window(self, offset: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens int64, fgram ids int64, match lengths uint8) of positions [offset,
        offset + length), matches cut at the window's start."""
        t, f, m = self._raw(offset, length)
        truncate(self.index, t, f, m, length)
        return t, f, m

    def windows(self, offsets: Any, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The windows at ``offsets``, stacked: three [len(offsets), length] arrays; the
        matches of all of them cut in one vectorised pass."""
        got = [self._raw(int(o), length) for o in np.asarray(offsets).reshape(-1)]
        if not got:
            empty = np.zeros((0, length), np.int64)
            return empty, empty.copy(), np.zeros((0, length), np.uint8)
        t, f, m = (np.concatenate(x) for x in zip(*got, strict=True))
        truncate(self.index, t, f, m, length)
        n = len(got)
        return t.reshape(n, length), f.reshape(n, length), m.reshape(n, length)


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
    tags: str | Location,
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
    reader = FgramTags.open(tags, table, storage)
    index = reader.index
    buf_t: list[np.ndarray] = []
    buf_f: list[np.ndarray] = []
    buf_m: list[np.ndarray] = []
    have = 0
    for i in range(len(reader.units)):  # unit by unit (each read once), in order
        tokens, fid, mlen = reader.unit(i, keep=False)
        buf_t.append(tokens)
        buf_f.append(fid.copy())  # cut in place below: the reader's copy stays as written
        buf_m.append(mlen.copy())
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
