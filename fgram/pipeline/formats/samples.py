"""Datasets of sample files listed by an ``index.json`` beside them (MosaicML MDS,
LitData): each file a shard, its samples in order behind a header of ``uint32`` sample
count and ``uint32`` byte offsets (count + 1 of them, from the file's start), the whole
file zstd-compressed when the index says so.

Documents: by default the samples are windows of one token stream (llm-foundry's
``concat_tokens``, litgpt's ``TokensLoader``), split into documents at ``--doc-sep``
only; with ``--samples-are-documents`` each sample is a document (read as Parquet's
rows are). A format whose stream runs on across files (`SampleFormat.linked`: MDS)
reads past a file's end into the next ones in its index (`link` records the
neighbours, and their checksums in each shard's own, so that a file added or changed
beside one is a change of it too).

A unit is a run of sample groups (about ``GROUP_TOKENS`` each), read by its byte range;
a compressed file is one unit (zstd is read from the file's start). Tags: as Parquet's,
one Parquet file per unit, a row per sample (``sample``: its index in the file).
"""

from __future__ import annotations

import json
import threading
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import Match, Tagged, digest, folder_and_name, mtime
from fgram.pipeline.formats.flat import match_values
from fgram.pipeline.formats.guards import report
from fgram.pipeline.formats.parquet import ParquetFormat
from fgram.pipeline.formats.reading import (
    ReadOptions,
    Shard,
    Stream,
    Unit,
    check_bounds,
    check_range,
    reading,
)
from fgram.pipeline.io.storage import filesystem
from fgram.pipeline.kernels.scratch import Scratch, work_array
from fgram.pipeline.kernels.streams import separate

GROUP_TOKENS = 1 << 20  # tokens a group of samples holds, about (units are runs of them)
REACH = 8  # neighbour files linked on each side: past the longest n-gram (K <= 8)
HEAD = 65536  # bytes of a file's head and tail in its checksum
Part = dict[str, Any]  # what reading one file needs: its uri, samples and layout
_INDEXES: dict[tuple[str, int, float | None], tuple[Any, set[str]]] = {}
_LOCK = threading.Lock()


class SampleFile:
    """A sample file's bytes as written (before any compression), read by ranges: a
    plain file at offsets, a zstd file by decompressing from its start (forward)."""

    def __init__(self, part: Part, storage: dict[str, Any] | None) -> None:
        self.uri, self.zstd = part["uri"], part.get("compression") == "zstd"
        self.fs, self.path = filesystem(self.uri, storage)
        self.f: Any = None
        self.at = 0

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Bytes [lo, hi) as uint8 (fewer at the end)."""
        if not self.zstd:
            if self.f is None:
                self.f = self.fs.open_input_file(self.path)
            return np.frombuffer(self.f.read_at(max(hi - lo, 0), lo), np.uint8)
        import zstandard

        try:
            if self.f is None or lo < self.at:
                self.close()
                raw = self.fs.open_input_stream(self.path)
                self.f, self.at = zstandard.ZstdDecompressor().stream_reader(raw), 0
            while self.at < lo:  # skipped forward: read and dropped
                skipped = len(self.f.read(min(lo - self.at, 1 << 24)))
                if not skipped:
                    return np.zeros(0, np.uint8)
                self.at += skipped
            out = np.empty(max(hi - lo, 0), np.uint8)
            got = 0
            while got < len(out) and (m := self.f.readinto(out[got:].data)):
                got += m
            self.at += got
            return out[:got]
        except zstandard.ZstdError as exc:
            raise InputError(self.uri, f"does not decompress as zstd ({exc})") from None

    def offsets(self, count: int) -> np.ndarray:
        """The header's sample offsets (count + 1), checked."""
        head = self.read(0, 4 + 4 * (count + 1))
        if len(head) < 4 + 4 * (count + 1):
            raise InputError(self.uri, "its header is cut short")
        found = int(head[:4].view("<u4")[0])
        if found != count:
            raise InputError(self.uri, f"holds {found} samples, its index says {count}")
        offsets = head[4:].view("<u4").astype(np.int64)
        if (np.diff(offsets) < 0).any() or offsets[0] < len(head):
            raise InputError(self.uri, "its sample offsets are not in order (corrupt?)")
        return offsets

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


@contextmanager
def opened(part: Part, storage: dict[str, Any] | None) -> Iterator[tuple[SampleFile, np.ndarray]]:
    """A sample file open, with its header's offsets."""
    f = SampleFile(part, storage)
    try:
        with reading(part["uri"]):
            yield f, f.offsets(part["n_items"])
    finally:
        f.close()


class SampleFormat(ParquetFormat):
    """A format of sample files listed by an ``index.json``. Subclasses read their index
    (`entry`: what a file's record needs from it, and the raw size) and a run of
    samples' token values (`decode`)."""

    linked = False  # whether the token stream runs on into the next file of the index

    @abstractmethod
    def entry(self, fs: pafs.FileSystem, path: str, uri: str, opts: ReadOptions) -> dict[str, Any]:
        """From the file's index: its ``position`` in it, ``samples``, ``raw`` size
        (before compression), ``compression`` (None or "zstd"), ``dtype``, ``column``
        (the tokens' name) and what `decode` needs (``codec``)."""

    @abstractmethod
    def decode(
        self, buf: np.ndarray, offsets: np.ndarray, part: Part
    ) -> tuple[np.ndarray, np.ndarray]:
        """(token counts, concatenated token values) of the samples whose bytes are
        ``buf``, the samples at ``offsets`` (relative to buf, one more than samples)."""

    @abstractmethod
    def estimate(self, sizes: np.ndarray, part: Part) -> np.ndarray:
        """About how many tokens samples of these byte sizes hold (for planning)."""

    def reads_doc_sep(self, opts: ReadOptions) -> bool:
        return not opts.samples_are_documents

    def verify(self, offsets: np.ndarray, part: Part) -> None:  # noqa: B027
        """Checks of a file's header against its index (none by default)."""

    def tag_name(self, shard: Shard) -> str:
        return folder_and_name(shard)

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        e = self.entry(fs, path, uri, opts)
        if e["compression"] is None and info.size != e["raw"]:
            raise InputError(uri, f"{info.size} bytes, its index says {e['raw']}: truncated?")
        part = {"uri": uri, "n_items": e["samples"], **e}
        with opened(part, opts.storage) as (f, offsets):
            if offsets[-1] != e["raw"]:
                raise InputError(uri, f"its samples end at byte {offsets[-1]}, not {e['raw']}")
            self.verify(offsets, part)
            if e["samples"]:  # the first sample decodes; its tokens' dtype (MDS: in it)
                e["dtype"] = part["dtype"] = self._tokens(f, offsets, part, 0, 1)[1].dtype.str
            with fs.open_input_file(path) as raw:
                blocks = [
                    (0, raw.read_at(HEAD, 0)),
                    (1, raw.read_at(HEAD, max(info.size - HEAD, 0))),
                ]
        sizes = self.estimate(np.diff(offsets), part)
        total = int(sizes.sum())
        groups = 1 if e["compression"] else max(1, min(len(sizes), -(-total // GROUP_TOKENS)))
        cuts = [len(sizes) * g // groups for g in range(groups + 1)]
        cum = np.concatenate([[0], np.cumsum(sizes)])
        entry = json.dumps(e, sort_keys=True, default=str).encode()
        return Shard(
            uri=uri,
            format=self.name,
            size=info.size,
            mtime=mtime(info),
            n_items=e["samples"],
            row_groups=[int(cum[b] - cum[a]) for a, b in zip(cuts, cuts[1:], strict=False)],
            checksum=digest(info.size, [*blocks, (2, entry)]),
            layout={k: e[k] for k in ("position", "compression", "dtype", "column", "codec")}
            | {"index": e["index"], "groups": groups, "least": e.get("least", 0)},
        )

    def link(self, shards: list[Shard], opts: ReadOptions) -> None:
        """Record each shard's neighbours in its index among the inputs (up to REACH on
        each side, a gap ending the run), and fold their checksums into its own."""
        if not self.linked or opts.samples_are_documents:
            return
        if shards and opts.doc_sep is None:
            report(
                [
                    f"{shards[0].uri}: its samples read as one document (no --doc-sep, "
                    "no --samples-are-documents)"
                ],
                opts.strict,
            )
        runs: dict[str, list[Shard]] = {}
        for s in sorted(shards, key=lambda s: (s.layout["index"], s.layout["position"])):
            if sum(s.row_groups) > 0:  # a file without tokens does not join two others
                runs.setdefault(s.layout["index"], []).append(s)
        for run in runs.values():
            own = [s.checksum for s in run]
            for i, s in enumerate(run):
                pos = s.layout["position"]
                before = take_while(run[max(i - REACH, 0) : i][::-1], pos, -1)
                after = take_while(run[i + 1 : i + 1 + REACH], pos, 1)
                s.layout["before"] = [part_of(p) for p in before]
                s.layout["next"] = [part_of(p) for p in after]
                near = own[i - len(before) : i][::-1] + own[i + 1 : i + 1 + len(after)]
                if near:
                    s.checksum = digest(
                        s.size, [(0, (s.checksum or "").encode()), (1, repr(near).encode())]
                    )

    def sample_range(self, shard: Shard, unit: Unit) -> tuple[int, int]:
        groups = shard.layout["groups"]
        return shard.n_items * unit.start // groups, shard.n_items * unit.stop // groups

    def tokens(
        self, part: Part, a: int, b: int, storage: dict[str, Any] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(token counts, values) of samples [a, b) of one file."""
        with opened(part, storage) as (f, offsets):
            return self._tokens(f, offsets, part, a, b)

    def _tokens(
        self, f: SampleFile, offsets: np.ndarray, part: Part, a: int, b: int
    ) -> tuple[np.ndarray, np.ndarray]:
        if b <= a:
            return np.zeros(0, np.int64), np.zeros(0, np.dtype(part["dtype"]))
        buf = f.read(int(offsets[a]), int(offsets[b]))
        if len(buf) != offsets[b] - offsets[a]:
            raise InputError(part["uri"], "file shrank while being read")
        with reading(part["uri"]):
            return self.decode(buf, offsets[a : b + 1] - offsets[a], part)

    def rows(
        self, shard: Shard, unit: Unit, columns: list[str] | None, storage: dict[str, Any] | None
    ) -> pa.Table:
        a, b = self.sample_range(shard, unit)
        lengths, values = self.tokens(part_of(shard), a, b, storage)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
        table = pa.table({shard.layout["column"]: lists})
        if columns is None:
            table = table.append_column("sample", pa.array(np.arange(a, b, dtype=np.int64)))
        return table

    def read(
        self,
        shard: Shard,
        unit: Unit,
        opts: ReadOptions,
        overlap: int,
        scratch: Scratch | None = None,
    ) -> Stream:
        if opts.samples_are_documents:
            return super().read(shard, unit, opts, overlap, scratch)
        a, b = self.sample_range(shard, unit)
        part = part_of(shard)
        _, own = self.tokens(part, a, b, opts.storage)
        prior = self.behind(part, a, 1, opts.storage)
        need = max(overlap, 1 if opts.doc_sep is not None else 0)
        ahead, elsewhere = self.ahead(shard, b, need, opts.storage)
        body = np.concatenate([own, ahead]) if len(ahead) else own
        # a document starting at a file's first token is counted with the file before
        start = bool(len(prior) == 0 and not shard.layout.get("before"))
        if opts.doc_sep is None:
            vmax = check_range(body, shard.uri)
            tokens = work_array(scratch, "tokens", len(body), np.uint32)
            tokens[:] = body
            documents, n_tokens = int(start and len(own) > 0), len(own)
        else:
            sep = opts.doc_sep
            before = bool(prior[0] == sep) if len(prior) else start
            tokens = work_array(scratch, "tokens", len(body), np.uint32)
            documents, n_tokens, vmin, vmax = separate(body, sep, len(own), before, tokens)
            check_bounds(int(vmin), int(vmax), shard.uri)
            ended = bool(own[-1] == sep) if len(own) else before
            documents += int(ended and elsewhere and ahead[0] != sep)
        return Stream(
            tokens=tokens,
            limit=len(own),
            documents=int(documents),
            n_tokens=int(n_tokens),
            max_token=int(vmax),
        )

    def behind(self, part: Part, a: int, k: int, storage: dict[str, Any] | None) -> np.ndarray:
        """Up to ``k`` token values just before sample ``a`` of one file (fewer: the file
        starts), walking back a block of samples at a time."""
        got: list[np.ndarray] = []
        have, step = 0, 8
        if a <= 0 or k <= 0:
            return np.zeros(0, np.dtype(part["dtype"]))
        with opened(part, storage) as (f, offsets):
            while a > 0 and have < k:
                lo = max(a - step, 0)
                _, values = self._tokens(f, offsets, part, lo, a)
                got.insert(0, values)
                have += len(values)
                a, step = lo, step * 2
        values = np.concatenate(got)
        return values[len(values) - min(k, len(values)) :]

    def ahead(
        self, shard: Shard, b: int, k: int, storage: dict[str, Any] | None
    ) -> tuple[np.ndarray, bool]:
        """Up to ``k`` token values from sample ``b`` on: this file's, then (a linked
        format) the next files'; and whether the first of them is another file's."""
        got: list[np.ndarray] = []
        have, first_elsewhere = 0, False
        parts = [(part_of(shard), b)] + [(p, 0) for p in shard.layout.get("next", [])]
        for n, (part, a) in enumerate(parts):
            if have >= k:
                break
            with opened(part, storage) as (f, offsets):
                step = 8
                while a < part["n_items"] and have < k:
                    hi = min(a + step, part["n_items"])
                    _, values = self._tokens(f, offsets, part, a, hi)
                    if have == 0 and len(values):
                        first_elsewhere = n > 0
                    got.append(values)
                    have += len(values)
                    a, step = hi, step * 2
        if not got:
            return np.zeros(0, np.dtype(shard.layout["dtype"])), False
        values = np.concatenate(got)
        return values[:k], first_elsewhere

    def tag(self, shard: Shard, unit: Unit, opts: ReadOptions, back: int, match: Match) -> Tagged:
        if opts.samples_are_documents:
            return super().tag(shard, unit, opts, back, match)
        a, b = self.sample_range(shard, unit)
        part = part_of(shard)
        lengths, own = self.tokens(part, a, b, opts.storage)
        prior = [self.behind(part, a, back, opts.storage)]
        for p in shard.layout.get("before", []):  # the files before, nearest first
            if sum(map(len, prior)) >= back:
                break
            prior.insert(0, self.behind(p, p["n_items"], back, opts.storage))
        before = np.concatenate(prior)[-back:] if back else np.zeros(0, own.dtype)
        raw = np.concatenate([before, own])
        fid, mlen = match_values(match, raw, opts.doc_sep, shard.uri)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        samples = pa.table({"sample": pa.array(np.arange(a, b, dtype=np.int64))})
        return Tagged(fid[len(before) :], mlen[len(before) :], (samples, offsets, own))


def take_while(near: list[Shard], pos: int, way: int) -> list[Shard]:
    """The neighbours in a run that follow one another in the index from ``pos``, as
    many as REACH tokens need (``least``: the fewest tokens a file may hold)."""
    out: list[Shard] = []
    held = 0
    for s in near:
        if s.layout["position"] != pos + way * (len(out) + 1) or held >= REACH:
            break
        out.append(s)
        held += s.layout.get("least", 0)
    return out


def part_of(shard: Shard) -> Part:
    """What reading one file of a shard needs (a shard, or a neighbour of one)."""
    keep = ("compression", "dtype", "column", "codec")
    return {"uri": shard.uri, "n_items": shard.n_items} | {k: shard.layout.get(k) for k in keep}


def read_index(fs: pafs.FileSystem, path: str, uri: str) -> tuple[Any, set[str]]:
    """An ``index.json`` parsed, and the names of the files in its folder: read once per
    version of the file (planning describes its files side by side)."""
    with reading(uri):
        info = fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise InputError(uri, "is missing (the files it lists are read with it)")
        key = (uri, info.size, info.mtime.timestamp() if info.mtime else None)
        with _LOCK:
            if key in _INDEXES:
                return _INDEXES[key]
        with fs.open_input_stream(path) as f:
            text = f.read()
        folder = path.rpartition("/")[0]
        listed = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InputError(uri, f"not JSON ({exc})") from None
    found = (doc, {i.path.rpartition("/")[2] for i in listed})
    with _LOCK:
        _INDEXES[key] = found
    return found
