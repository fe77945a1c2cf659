"""A token-shard format as two objects: `ShardFormat`, how its shards are read, and
`TagFiles`, where their tags go, each in a `layouts.TagLayout`.

A format says which files are its own (their names), what a file holds without
reading its tokens (`describe`: a `reading.Shard`, with a content checksum), how a
shard is cut into units of work (`units`, `tokens_in`), how a unit is read as a token
stream with document starts (`read`) and tagged (`tag`). Its `tags` say where the tags
go and how they are read back (`TagFiles.write`, `read`). Jobs never ask which format a
shard has: they call its format (`registry.format_of`). A new format is one module with
a subclass and one line in `registry.FORMATS` (docs/internals.md shows one).
"""

from __future__ import annotations

import hashlib
import itertools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.formats.layouts import FGRAM, TagLayout
from fgram.pipeline.formats.reading import ReadOptions, Shard, Stream, Unit
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels.keys import MAX_TOKEN
from fgram.pipeline.kernels.scratch import Scratch

Match = Callable[..., tuple[np.ndarray, np.ndarray]]  # `FgramIndex.match(tokens, doc_starts=)`
TagFile = Callable[[str], Location]  # a tags output's file ``tags/...`` -> where it is
Exists = Callable[[str], bool]  # whether a file (a path on the shard's filesystem) is there


@dataclass
class Tagged:
    """One unit's tags: the f-gram id and match length of each of its own positions, and
    what the format keeps to write them (``rest``: e.g. the input's other columns)."""

    fid: np.ndarray
    mlen: np.ndarray
    rest: Any = None


class ShardFormat(ABC):
    """One format of token shards. Subclasses set ``name`` (what a shard's record
    says: `reading.Shard.format`, kept in manifests and the refresh store),
    ``extensions`` (the file names it reads) and ``tag_layout`` (the tags' files, as
    the annotate manifest describes them)."""

    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]
    tag_layout: ClassVar[str]
    layouts: ClassVar[tuple[TagLayout, ...]] = (FGRAM,)  # the layouts its tags are written in
    tags: TagFiles  # its tags' files (set by each format)

    def reads_doc_sep(self, opts: ReadOptions) -> bool:
        """Whether ``--doc-sep`` splits this format's documents (not where the format
        says where they end: a row each, an index)."""
        return False

    listed: ClassVar[tuple[str, ...]] = ()  # the extensions an error names (default: all)

    def claims(self, path: str, exists: Exists | None = None) -> bool:
        """Whether a file of this name is of this format; ``exists`` (given while
        planning) tells whether a file beside it is there, for formats that pair files."""
        return path.lower().endswith(self.extensions)

    def tag_name(self, shard: Shard) -> str:
        """The name its tags files are named after (unique among a run's inputs)."""
        return os.path.basename(shard.uri)

    def shard_of(self, path: str, exists: Exists | None = None) -> str | None:
        """The shard a file that is read beside one belongs to (an index: its data
        file), else None: such a file is never a shard of its own."""
        return None

    def link(self, shards: list[Shard], opts: ReadOptions) -> None:  # noqa: B027
        """After every input is described: record in each of this format's shards what
        it needs of the others (formats whose documents run on across files)."""

    def from_prefix(self, path: str) -> list[str]:
        """The files a prefix (a name that is no file) stands for in this format, all of
        which must exist, the shard first (Megatron's ``PREFIX``: ``PREFIX.bin`` and
        ``PREFIX.idx``)."""
        return []

    @abstractmethod
    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        """The shard record of one file, from its metadata (no token read): a clear
        `InputError` naming the file when it is not of this format after all."""

    @abstractmethod
    def units(self, shard: Shard, most: int) -> list[tuple[int, int]]:
        """The shard cut into units [start, stop) of at most ``most`` tokens each (in the
        format's own coordinates: token positions, row groups, ...)."""

    @abstractmethod
    def tokens_in(self, shard: Shard, unit: Unit) -> int:
        """How many token slots a unit covers, from the record alone."""

    @abstractmethod
    def read(
        self,
        shard: Shard,
        unit: Unit,
        opts: ReadOptions,
        overlap: int,
        scratch: Scratch | None = None,
    ) -> Stream:
        """The unit as a token stream (SENTINEL at document boundaries), with
        ``overlap`` tokens past its end where the next unit's tokens continue a document
        (so that every n-gram starting in the unit is seen once)."""

    def top_token(self, shard: Shard) -> int:
        """The largest token id the shard's type allows (before any is read)."""
        return MAX_TOKEN

    def raw_values(
        self, shard: Shard, unit: Unit, overlap: int, storage: dict[str, Any] | None
    ) -> np.ndarray | None:
        """The unit's raw values (and ``overlap`` past it) as a memory map of a file on
        this machine, separators in place, when the format stores them so; else None
        (the unit is read as a stream)."""
        return None

    @abstractmethod
    def tag(self, shard: Shard, unit: Unit, opts: ReadOptions, back: int, match: Match) -> Tagged:
        """The unit read and tagged by ``match``; ``back``: how many tokens before the unit
        a match may start at (K - 1)."""


class TagFiles(ABC):
    """Where a format's tags go and how they are read back, in a `layouts.TagLayout`:
    the second protocol of a format (`ShardFormat.tags`), apart from its reading."""

    assembles: ClassVar[bool] = False  # tags written per unit on a store are joined after
    by_range: ClassVar[bool] = False  # `read_range` reads part of a unit's tags

    def prepare(  # noqa: B027
        self, folder: str, shard: Shard, id_type: np.dtype, layout: TagLayout
    ) -> None:
        """Make what a local tags folder needs before the tasks write (nothing by
        default)."""

    @abstractmethod
    def write(
        self,
        tagged: Tagged,
        shard: Shard,
        unit: Unit,
        staging: Location,
        id_type: np.dtype,
        layout: TagLayout,
    ) -> None:
        """Write one unit's tags into the staging folder."""

    def assemble(  # noqa: B027
        self,
        shard: Shard,
        starts: list[int],
        id_type: np.dtype,
        staging: Location,
        layout: TagLayout,
    ) -> None:
        """Join a shard's per-unit tag objects on a store (``assembles`` only)."""

    def index(  # noqa: B027
        self, shard: Shard, staging: Location, id_type: np.dtype, layout: TagLayout, storage: Any
    ) -> None:
        """After a shard's tags are written: the files a layout adds beside them (a
        Megatron index), a shard per task (nothing by default)."""

    @abstractmethod
    def read(
        self,
        shard: Shard,
        unit: Unit,
        column: str,
        storage: dict[str, Any] | None,
        where: TagFile,
        layout: TagLayout,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, fgram ids, match lengths) of one unit of a tags output."""

    def read_range(
        self,
        shard: Shard,
        unit: Unit,
        a: int,
        b: int,
        storage: dict[str, Any] | None,
        where: TagFile,
        layout: TagLayout,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions [a, b) of one unit of a tags output (``by_range`` only)."""
        raise NotImplementedError(type(self).__name__)

    def maps(
        self, shard: Shard, storage: dict[str, Any] | None, where: TagFile, layout: TagLayout
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(tokens or None, fgram ids, match lengths) of a shard's tags as arrays indexed
        like its tokens, kept by a reader (``by_range`` only)."""
        raise NotImplementedError(type(self).__name__)


def digest(size: int, blocks: list[tuple[int, bytes]]) -> str:
    """A content checksum: sha256 of the size and the given blocks of a file."""
    h = hashlib.sha256(str(size).encode())
    for _, data in blocks:
        h.update(data)
    return h.hexdigest()[:32]


def mtime(info: pafs.FileInfo) -> float | None:
    return info.mtime.timestamp() if info.mtime is not None else None


def even_ranges(n: int, most: int) -> list[tuple[int, int]]:
    """[0, n) cut into the fewest ranges of at most ``most`` items, of equal size."""
    parts = -(-n // most)
    cuts = [n * i // parts for i in range(parts + 1)] if parts else []
    return list(itertools.pairwise(cuts))


def group_ranges(sizes: list[int], most: int) -> list[tuple[int, int]]:
    """Runs [a, b) of consecutive groups (of ``sizes`` items each) as even as the groups
    allow, as many as ``most`` items a run needs: cut at the group boundaries nearest to
    equal shares, so a run holds at most ``most`` items and half a group more on each
    side (100M tokens of 0.5M in 16M units: six of 16.7M, not six full ones and a small
    seventh, which two cores count in one more round)."""
    if not sizes:
        return []
    cum = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
    parts = max(1, -(-int(cum[-1]) // max(most, 1)))
    targets = cum[-1] * np.arange(1, parts) / parts
    right = np.searchsorted(cum, targets).clip(1, len(sizes))
    nearer_left = targets - cum[right - 1] < cum[right] - targets
    cuts = np.unique(np.concatenate([[0], right - nearer_left, [len(sizes)]]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts)]


def folder_and_name(shard: Shard) -> str:
    """``<folder>-<name>``: a tags name for formats whose folders hold files of the same
    names (a ``DatasetDict``'s splits, MDS or LitData datasets side by side)."""
    folder, name = os.path.split(shard.uri)
    return f"{os.path.basename(folder)}-{name}"
