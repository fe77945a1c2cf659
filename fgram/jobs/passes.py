"""The pass loop that build and refresh share, and the selection after it.

For k = 2..K a pass counts (a job's `PassSteps.count`), merges (`merge`: a count
histogram per key range) and keeps (`keep`: the k-grams at or above the threshold get
ids). The loop keeps the books they share: the stage lines, the times of the three
stages, the threshold raised to the S-th largest count seen so far
(`selection.add_length`), one `PassRecord` per pass. After the passes, `select` turns
the histograms into the cutoff and the (count, length) groups, and `table_manifest`
writes the manifest fields both jobs fill alike.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fgram.jobs.progress import PROGRESS
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.formats.inputs import shard_record
from fgram.pipeline.formats.reading import Shard
from fgram.pipeline.formats.table import table_record
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.selection import add_length, selection
from fgram.pipeline.records import PassRecord, TableManifest


@dataclass
class Merged:
    """A pass's merge: each key range's count histogram, and what the job keeps of it."""

    hists: list[dict[int, int]]
    result: Any = None


class PassSteps(ABC):
    """What one job does in each pass; `run_passes` does the rest."""

    count_label: ClassVar[str]  # the stage lines: "pass k/K: <label>"
    merge_label: ClassVar[str]
    last_stage: ClassVar[str]  # the third stage's name in the record (keep, table)
    stops_when_empty: ClassVar[bool] = True  # False: passes go on (counts only) after

    def count_size(self) -> tuple[int, int]:
        """The count stage's tasks and tokens for its progress line (0: unknown)."""
        return 0, 0

    @abstractmethod
    def count(self, k: int, floor: int) -> Any:
        """Count the k-grams (a job over the units); what `merge` and `keep` need."""

    @abstractmethod
    def merge(self, k: int, floor: int, counted: Any) -> Merged:
        """Merge the counts of length k by key range; keys below ``floor`` may go."""

    @abstractmethod
    def keep(
        self, k: int, threshold: int | None, counted: Any, merged: Merged
    ) -> tuple[int, dict[str, Any]]:
        """Give the k-grams at or above ``threshold`` their ids (None: a length past the
        last one that kept any: nothing); returns how many, and the record's fields of
        this job."""

    def done(self, k: int, threshold: int, record: PassRecord) -> None:  # noqa: B027
        """Pass k is complete (a build saves its state here)."""


def run_passes(
    steps: PassSteps,
    cfg: BuildConfig,
    hists: dict[int, dict[int, int]],
    records: list[PassRecord],
    first: int = 2,
    threshold: int | None = None,
) -> int:
    """Passes ``first``..K; ``hists`` (length -> count -> n) and ``records`` grow with
    each. Returns the threshold after the last."""
    threshold = cfg.min_count if threshold is None else threshold
    empty = False
    for k in range(first, cfg.max_len + 1):
        t0 = time.time()
        floor = threshold
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: {steps.count_label}", *steps.count_size())
        counted = steps.count(k, floor)
        t_count = time.time()
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: {steps.merge_label}")
        merged = steps.merge(k, floor, counted)
        t_merge = time.time()
        if not empty:
            threshold = add_length(hists, k, merged.hists, cfg.size, threshold)
        kept, fields = steps.keep(k, None if empty else threshold, counted, merged)
        record = PassRecord(
            length=k,
            count_threshold=floor,
            threshold=threshold,
            kept=kept,
            seconds=round(time.time() - t0, 3),
            stages={
                "count": round(t_count - t0, 3),
                "merge": round(t_merge - t_count, 3),
                steps.last_stage: round(time.time() - t_merge, 3),
            },
            **fields,
        )
        records.append(record)
        steps.done(k, threshold, record)
        empty = empty or kept == 0
        if empty and steps.stops_when_empty:
            break
    return threshold


def check_tokens(cfg: BuildConfig, totals: dict[str, int]) -> None:
    if totals["tokens"] == 0:
        raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")


@dataclass
class Selected:
    """The selection of a build or a refresh, from the final histograms alone."""

    cutoff: int
    cut_len: int
    size: int
    by_len: dict[int, int]
    groups: Groups


def select(hists: dict[int, dict[int, int]], size: int | None) -> Selected:
    PROGRESS.stage("select")
    cutoff, cut_len, selected, by_len = selection(hists, size)
    return Selected(cutoff, cut_len, selected, by_len, Groups(hists, cutoff, cut_len))


def table_manifest(
    engine: str,
    cfg: BuildConfig,
    shards: list[Shard],
    totals: dict[str, int],
    passes: list[PassRecord],
    chosen: Selected,
    select_record: dict[str, Any],
    **more: Any,
) -> TableManifest:
    """A table's manifest: what build and refresh record alike, and ``more``."""
    return TableManifest(
        engine=engine,
        config=cfg.record(),
        inputs=[shard_record(s) for s in shards],
        totals=totals,
        passes=passes,
        cutoff_count=chosen.cutoff if chosen.size else None,
        fgrams=chosen.size,
        by_length={str(k): n for k, n in sorted(chosen.by_len.items())},
        select=select_record,
        table=table_record(),
        **more,
    )


def canonical_run(cfg: BuildConfig, tokenizer: dict | None) -> tuple[BuildConfig, dict | None]:
    """A --canonical run's config with its map (``token_map``: Engram's canonical id of
    each token id, from the shards' tokenizer), and the manifest's record of the map
    (its sha256, its size, the tokenizer); (cfg, None) without --canonical."""
    if not cfg.canonical:
        return cfg, None
    from fgram.pipeline.text.canonical import canonical_record
    from fgram.pipeline.text.tokenizer import known_tokenizer

    path = known_tokenizer({"tokenizer": tokenizer}) if tokenizer else None
    if path is None:
        raise ConfigError(
            "--canonical needs the shards' tokenizer at hand: shards made by `fgram "
            "tokenize` (their manifest names it, and its file is on this machine), or text "
            "with --tokenizer"
        )
    lookup, record = canonical_record(path)
    return dataclasses.replace(cfg, token_map=lookup.astype(np.uint32)), record
