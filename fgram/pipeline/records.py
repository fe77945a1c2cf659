"""Typed records that cross processes or land on disk as JSON: the table manifest and its
pass records (one builder for `fgram build` and `fgram refresh`), and the base that the
jobs' own records (resume state, task summaries, the refresh store) share.

A record is a dataclass. `JsonRecord.to_json` writes its fields (nested records too),
leaves out the optional ones that are None, and adds ``format`` when the class has one;
`JsonRecord.from_json` is its inverse, and gives None for a record of another format.
JSON keeps only string keys: a class restores its integer keys and nested records in
`JsonRecord.restore`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from fgram.version import __version__

OMIT = "omit_if_none"
R = TypeVar("R", bound="JsonRecord")


def optional(default: Any = None) -> Any:
    """A field that the JSON leaves out while it is None."""
    return dataclasses.field(default=default, metadata={OMIT: True})


def plain(value: Any) -> Any:
    """A value as JSON holds it: records as their `to_json`, containers element-wise."""
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def int_keys(mapping: dict[Any, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in mapping.items()}


class JsonRecord:
    """The JSON round trip of a dataclass (see the module's docstring)."""

    FORMAT: ClassVar[int | None] = None  # None: versioned by the record that holds it

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.FORMAT is None else {"format": self.FORMAT}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get(OMIT):
                continue
            out[f.name] = plain(value)
        return out

    @classmethod
    def from_json(cls: type[R], rec: dict[str, Any]) -> R | None:
        """The record ``rec`` holds (keys it does not know are ignored); None when it has
        another format (one without a format is taken as this one)."""
        if cls.FORMAT is not None and rec.get("format", cls.FORMAT) != cls.FORMAT:
            return None
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**cls.restore({k: v for k, v in rec.items() if k in names}))

    @classmethod
    def restore(cls, values: dict[str, Any]) -> dict[str, Any]:
        """What JSON could not keep (integer keys, nested records), put back."""
        return values


@dataclasses.dataclass
class PassRecord(JsonRecord):
    """One pass (length k) of a build or a refresh: the manifest's ``passes[]``."""

    length: int
    count_threshold: int  # the threshold the pass counted at (its floor)
    threshold: int  # the threshold after it (an n-gram is kept at or above it)
    candidates: int  # candidate positions counted
    kept: int  # frequent k-grams
    partitions: int  # key ranges of its merge
    seconds: float
    stages: dict[str, float]  # count, merge, then keep (build) or table (refresh)
    # a build's
    distinct: int | None = optional()  # distinct keys summed over the units
    unit_bytes: int | None = optional()  # the bytes its count tasks wrote (the unit files)
    key_bits: list[int] | None = optional()  # the key code: prefix bits, token bits
    lookup: str | None = optional()  # how the next pass finds ids: broadcast or join
    # a refresh's
    new_units: int | None = optional()
    scanned_units: int | None = optional()  # old units scanned for newly frequent grams
    scanned_at_rare: int | None = optional()  # ... only at windows without an id before
    scanned_at_anchors: int | None = optional()  # ... only at windows with an anchor
    scanned_grams: int | None = optional()
    ids_added: int | None = optional()
    ids: int | None = optional()  # the id table's size
    delta: int | None = optional()  # entries of the length's delta runs
    compacted: bool | None = optional()  # the base rewritten with the delta folded in
    task_seconds: dict[str, float] | None = optional()  # count and scan tasks, summed


MANIFEST_FORMAT = 1


@dataclasses.dataclass
class TableManifest(JsonRecord):
    """``TABLE/manifest.json``: what a build or a refresh made, from what, and how."""

    FORMAT: ClassVar[int | None] = MANIFEST_FORMAT

    engine: str  # spark or local
    config: dict[str, Any]  # `BuildConfig.record`
    inputs: list[dict[str, Any]]  # `inputs.shard_record` of each input file
    totals: dict[str, int]  # documents, tokens
    passes: list[PassRecord]
    cutoff_count: int | None  # the smallest count selected (None: nothing selected)
    fgrams: int
    by_length: dict[str, int]  # f-grams per length
    select: dict[str, Any]  # the select stage: seconds, and how it ran
    seconds: float
    table: dict[str, Any]  # `table.table_record`: the Parquet schema and order
    kind: str = "fgram-table"
    fgram_version: str = __version__
    units: int | None = optional()  # a build's units of work
    positions: dict[str, int] | None = optional()  # a build's n-gram positions per length
    head_start_tasks: int | None = optional()  # tasks run by the driver itself
    executor_start_seconds: dict[str, float] | None = optional()
    compile_seconds: float | None = optional()  # the first run of an install: its kernels
    run_fingerprint: str | None = optional()  # options and inputs (a rerun's test)
    resumed: dict[str, int] | None = optional()  # a resumed build: where it continued
    timing: dict[str, float] | None = optional()  # a refresh's planning
    refresh: dict[str, Any] | None = optional()  # a refresh: shards new, kept, removed
    files: list[str] | None = optional()  # the table's files (`publish.finish` adds them)
    # name in files -> its "bytes" and "sha256" (`publish.finish`; `fgram verify` checks)
    checksums: dict[str, dict[str, Any]] | None = optional()
    generation: str | None = optional()  # on an object store: the files' generation
    tokenizer: dict[str, Any] | None = optional()  # inputs made by `fgram tokenize`: its tokenizer
    text: dict[str, Any] | None = optional()  # a build from text: its inputs, documents, seconds
    # --canonical: counted over Engram's canonical ids (the map's sha256, size, tokenizer)
    canonical: dict[str, Any] | None = optional()

    @classmethod
    def restore(cls, values: dict[str, Any]) -> dict[str, Any]:
        passes = [PassRecord.from_json(p) for p in values.get("passes", [])]
        return {**values, "passes": passes}
