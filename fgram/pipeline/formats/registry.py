"""The token-shard formats fgram reads, by name and by file name: one line a format."""

from __future__ import annotations

import os

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.arrow import ArrowFormat
from fgram.pipeline.formats.base import Exists, ShardFormat
from fgram.pipeline.formats.datatrove import DatatroveFormat
from fgram.pipeline.formats.flat import FlatFormat
from fgram.pipeline.formats.litdata import LitdataFormat
from fgram.pipeline.formats.mds import MdsFormat
from fgram.pipeline.formats.megatron import MegatronFormat
from fgram.pipeline.formats.parquet import ParquetFormat
from fgram.pipeline.formats.reading import ReadOptions, Shard, Stream, Unit
from fgram.pipeline.kernels.scratch import Scratch
from fgram.pipeline.kernels.streams import map_tokens

FORMATS: tuple[ShardFormat, ...] = (
    ParquetFormat(),
    ArrowFormat(),
    MegatronFormat(),  # before flat: a .bin with its .idx beside it
    DatatroveFormat(),
    MdsFormat(),
    LitdataFormat(),  # before flat: chunk-*.bin with an index.json beside it
    FlatFormat(),
)
BY_NAME: dict[str, ShardFormat] = {f.name: f for f in FORMATS}
_LISTED = list(dict.fromkeys(ext for f in FORMATS for ext in f.listed or f.extensions))
KNOWN = ", ".join(_LISTED[:-1]) + " or " + _LISTED[-1]  # ".parquet, .arrow, ... or .npy"


def format_of(shard: Shard) -> ShardFormat:
    """The format of a shard (by its record's name)."""
    return BY_NAME[shard.format]


def format_for(path: str, exists: Exists | None = None) -> ShardFormat | None:
    """The format a file of this name is read as, or None; ``exists`` tells which files
    are beside it (without it, by the name alone)."""
    return next((f for f in FORMATS if f.claims(path, exists)), None)


def shard_of(path: str, exists: Exists | None = None) -> str | None:
    """The shard a file read beside one belongs to (``X.idx``: ``X.bin``), else None;
    ``exists`` tells which files are beside it."""
    return next((s for f in FORMATS if (s := f.shard_of(path, exists)) is not None), None)


def link(shards: list[Shard], opts: ReadOptions) -> list[Shard]:
    """The shards with the files of one index (MDS, LitData) in its order, in the places
    they took by name (``chunk-0-10`` after ``chunk-0-9``); each format then records in
    its shards what they need of one another."""
    places: dict[str, list[int]] = {}
    for i, s in enumerate(shards):
        if "index" in s.layout:
            places.setdefault(s.layout["index"], []).append(i)
    ordered = list(shards)
    for at in places.values():
        mine = sorted((shards[i] for i in at), key=lambda s: s.layout["position"])
        for i, s in zip(at, mine, strict=True):
            ordered[i] = s
    for f in FORMATS:
        f.link([s for s in ordered if s.format == f.name], opts)
    return ordered


def from_prefix(path: str) -> list[str]:
    """The files a prefix stands for (the first format that has a reading of it)."""
    return next((files for f in FORMATS if (files := f.from_prefix(path))), [])


def token_file(name: str) -> bool:
    """Whether a file in an input folder is a token shard, or read beside one (by its
    name)."""
    return format_for(os.path.basename(name)) is not None or shard_of(name) is not None


def read_unit(
    shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch: Scratch | None = None
) -> Stream:
    """Read one unit as a token stream; ``overlap`` tokens past its end where its format
    continues documents across units. With a ``scratch`` (`scratch.Scratch`), the
    stream's tokens may live in its buffers (valid until the next read with it)."""
    stream = format_of(shard).read(shard, unit, opts, overlap, scratch)
    if opts.token_map is not None:  # Engram's canonical ids: counted over the map's ids
        if not stream.tokens.flags.writeable:
            stream.tokens = stream.tokens.copy()
        top = map_tokens(stream.tokens, opts.token_map)
        if top == -2:
            raise InputError(
                shard.uri, f"a token id past the canonical map's {len(opts.token_map)} ids"
            )
        stream.max_token = int(top)
    return stream
