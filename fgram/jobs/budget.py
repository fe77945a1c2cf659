"""`--work-budget`: the most bytes a build's work files may take on their disk, held
before the run starts (an estimate from its tokens) and while its passes run (the bytes
they write, counted as their tasks finish)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fgram.pipeline.errors import ConfigError, NoSpace

# the largest pass's unit files per input token, measured (BENCHMARKS.md, "Work files per
# input token"), a little over the most: the estimate before a run. At the default units
# of 16Mi tokens: 4.37 on real text (383M tokens), 4.41 and 6.20 on synthetic corpora of
# 100M and 1B tokens; at 128M-token units, where a unit's files hold each distinct key
# once for 8x the tokens: 4.82 (1B) and 5.18 (10B)
WORK_BYTES_PER_TOKEN = 6.5
LARGE_UNITS, LARGE_UNIT_BYTES = 128 * 10**6, 5.3
DEFAULT_UNITS = 16 * 2**20
# a pass's total is projected from its finished units once this share of its tokens is in
PROJECT_AFTER = 0.1


class OverBudget(NoSpace):
    """A pass whose work files would not fit --work-budget: stopped, its completed passes
    kept for --resume."""

    resume_when = "with a larger --work-budget"


def gib(n: float) -> str:
    """Bytes as the option spells them (binary units): 52.1G, 3.5M, 800."""
    for suffix, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:.0f}"


def bytes_per_token(unit_tokens: int = DEFAULT_UNITS) -> float:
    """The largest pass's work bytes per input token at units of ``unit_tokens``: as
    measured at the default units and at 128M (log-linear between; no fewer below the
    default, nor past 128M, where nothing was measured)."""
    if unit_tokens <= DEFAULT_UNITS:
        return WORK_BYTES_PER_TOKEN
    if unit_tokens >= LARGE_UNITS:
        return LARGE_UNIT_BYTES
    at = math.log(unit_tokens / DEFAULT_UNITS) / math.log(LARGE_UNITS / DEFAULT_UNITS)
    return WORK_BYTES_PER_TOKEN + at * (LARGE_UNIT_BYTES - WORK_BYTES_PER_TOKEN)


def work_estimate(tokens: int, unit_tokens: int = DEFAULT_UNITS) -> int:
    """The bytes a build of ``tokens`` input tokens, in units of ``unit_tokens``, writes
    at its largest pass, about (a unit holds no more than the run's tokens)."""
    return math.ceil(tokens * bytes_per_token(min(unit_tokens, tokens)))


def check_fits(budget: int | None, tokens: int, unit_tokens: int = DEFAULT_UNITS) -> None:
    """Before a run: refused when its estimated work files are over the budget."""
    if budget is None:
        return
    need = work_estimate(tokens, unit_tokens)
    if need <= budget:
        return
    unit, large = min(unit_tokens, tokens), min(LARGE_UNITS, tokens)
    larger = (
        f", larger units (--unit-tokens 128M: {bytes_per_token(large):.2f} bytes a token, "
        f"about {gib(work_estimate(tokens, large))}; ~40 bytes a token of a unit in each "
        f"worker's memory)"
        if unit < large
        else ""
    )
    raise ConfigError(
        f"--work-budget {gib(budget)}: a build of {tokens:,} tokens writes about "
        f"{gib(need)} of work files at its largest pass ({bytes_per_token(unit):.2f} bytes "
        f"per input token); give a larger budget{larger}, or --work-dir on a disk with room"
    )


@dataclass
class PassBudget:
    """Pass k's work files against the budget, shown each count task's result as it comes
    (`Executor.map`'s ``watch``): the files kept from earlier passes (``held``) plus what
    this pass's units wrote, and once `PROJECT_AFTER` of its tokens are counted, what
    they will write at that rate. A unit's files of the pass before are removed as this
    pass counts it, so they are not added: the larger of the two passes is the peak."""

    budget: int
    k: int
    tokens: int  # the pass's input tokens
    held: int  # bytes kept from earlier passes (frequent sets, answers, merged ranges)
    written: int = 0
    counted: int = 0  # tokens of the units counted so far

    def __call__(self, stats) -> None:  # a `UnitCount`
        self.written += sum(f["bytes"] for f in stats.files.values())
        self.counted += stats.tokens
        total = self.held + self.written
        if total <= self.budget and self.counted < PROJECT_AFTER * self.tokens:
            return
        projected = self.held + math.ceil(self.written * self.tokens / max(self.counted, 1))
        if max(total, projected) > self.budget:
            share = self.counted / max(self.tokens, 1)
            raise OverBudget(
                f"pass {self.k}: its work files would take about {gib(max(total, projected))} "
                f"({gib(self.written)} written for {share:.0%} of its tokens, "
                f"{gib(self.held)} kept from earlier passes), over --work-budget "
                f"{gib(self.budget)}"
            )

    def check_merged(self, merged: int) -> None:
        """After the merge: its ranges' files too (written beside the units')."""
        total = self.held + self.written + merged
        if total > self.budget:
            raise OverBudget(
                f"pass {self.k}: its work files take {gib(total)} after its merge, over "
                f"--work-budget {gib(self.budget)}"
            )
