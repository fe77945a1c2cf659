"""The token-shard formats fgram reads, by name and by file name: one line a format."""

from __future__ import annotations

import os

from fgram.pipeline.formats.base import ShardFormat
from fgram.pipeline.formats.flat import FlatFormat
from fgram.pipeline.formats.parquet import ParquetFormat
from fgram.pipeline.formats.reading import ReadOptions, Shard, Stream, Unit
from fgram.pipeline.kernels.scratch import Scratch

FORMATS: tuple[ShardFormat, ...] = (
    ParquetFormat(),
    FlatFormat(),
)
BY_NAME: dict[str, ShardFormat] = {f.name: f for f in FORMATS}
_LISTED = [ext for f in FORMATS for ext in f.listed or f.extensions]
KNOWN = ", ".join(_LISTED[:-1]) + " or " + _LISTED[-1]  # ".parquet, .bin or .npy"


def format_of(shard: Shard) -> ShardFormat:
    """The format of a shard (by its record's name)."""
    return BY_NAME[shard.format]


def format_for(path: str) -> ShardFormat | None:
    """The format a file of this name is read as, or None."""
    return next((f for f in FORMATS if f.claims(path)), None)


def token_file(name: str) -> bool:
    """Whether a file in an input folder is a token shard (by its name)."""
    return format_for(os.path.basename(name)) is not None


def read_unit(
    shard: Shard, unit: Unit, opts: ReadOptions, overlap: int, scratch: Scratch | None = None
) -> Stream:
    """Read one unit as a token stream; ``overlap`` tokens past its end where its format
    continues documents across units. With a ``scratch`` (`scratch.Scratch`), the
    stream's tokens may live in its buffers (valid until the next read with it)."""
    return format_of(shard).read(shard, unit, opts, overlap, scratch)
