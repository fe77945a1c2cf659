"""The driver of `fgram build`: its job in the run sequence (`sequence`: checks, the
lock, the staging folder, publishing), whose stages are the pass loop (`passes`), the
select stage (`select`: decoded by broadcast, or by key range past the budget) and the
manifest."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.jobs import sequence
from fgram.jobs.budget import PassBudget, check_fits
from fgram.jobs.passes import (
    Merged,
    PassSteps,
    canonical_run,
    check_tokens,
    run_passes,
    select,
    table_manifest,
)
from fgram.jobs.progress import PROGRESS
from fgram.jobs.runs import SCRATCH, check_work_reach, fingerprint_digest, run_fingerprint
from fgram.jobs.sequence import Job, Run, begin
from fgram.jobs.table.passes import (
    MERGE_BYTES,
    CountStage,
    KeepStage,
    MergeStage,
    Plan,
    pass_code,
    say_notes,
    unit_files,
)
from fgram.jobs.table.select import write_table
from fgram.jobs.table.state import (
    BuildState,
    claimed_state,
    resume_record,
    save_state,
    work_location,
)
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import FgramError
from fgram.pipeline.formats.inputs import check_inputs, plan_shards, plan_units, tokens_of
from fgram.pipeline.io.publish import run_folder
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import Sweeper
from fgram.pipeline.kernels.keys import INVALID, KeyCode
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.warmup import compiled_before, warm_up
from fgram.pipeline.records import PassRecord, TableManifest


def run_build(cfg: BuildConfig, spark=None) -> dict:
    """Run `fgram build`; returns the manifest. Raises FgramError subclasses on bad input.

    ``cfg.engine == "local"`` runs the same tasks in forked processes without
    Spark; ``spark`` (or a session built from ``cfg.master``/``cfg.conf``) runs them
    on Spark; ``auto``, on a local master with no JVM up, as local (`engine_for`).
    """
    t_start = time.time()
    return sequence.run(BuildJob(begin(cfg, spark), spark, t_start))


def kernels_ready() -> float | None:
    """Compile (or load from numba's disk cache) the counting kernels; on the first run of
    an install, which compiles them, one stage line says so, and its seconds are
    returned (for the manifest and the report's time chart)."""
    if compiled_before():
        warm_up()
        return None
    t0 = time.time()
    PROGRESS.stage("compile kernels: first run of this install, cached for the next")
    warm_up()
    return round(time.time() - t0, 3)


class BuildJob(Job):
    """`fgram build` in the run sequence. Text inputs are tokenized first, under the
    output's lock, by a tokenize run of their own into a folder of this run's
    (``.TABLE.fgram-text``, beside its staging folder; it goes once the table is
    published, and a failed run keeps it for --resume). Then the plan (while Spark's
    JVM starts, about a core, the driver loads the kernels and counts pass-2 units on
    the other), the staging folder (`--work-dir`, a resumed run's state) and the pass
    loop (`passes`), the select stage (`select`) and the manifest."""

    what = "build run"
    kept = "the completed passes"

    def __init__(self, cfg: BuildConfig, spark, t_start: float) -> None:
        super().__init__(cfg, spark)
        self.t_start = t_start
        self.tokenizer: dict | None = None
        self.text: dict | None = None
        self.text_folder: Location | None = None

    def check(self) -> None:
        cfg = self.cfg
        if cfg.tokenizer:
            from fgram.pipeline.formats.names import TEXT_FILES, is_text_file

            check_inputs(cfg.inputs, cfg.storage, is_text_file, TEXT_FILES)
        else:  # a missing input: said before the JVM starts
            check_inputs(cfg.inputs, cfg.storage)
            self.cfg, self.tokenizer = cfg.tokenized()  # `fgram tokenize` outputs say how

    def places(self, out: Location) -> Location:
        """The staging folder: `--work-dir`'s, or beside the output."""
        return work_location(self.cfg, out)

    def ahead(self, staging: Location) -> None:
        """Text inputs tokenized into a folder of the run beside its staging folder, the
        output's lock held from before the first token."""
        cfg = self.cfg
        if not cfg.tokenizer:
            return
        self.text_folder = folder = run_folder(staging, "text")
        from fgram.jobs.tokenize import tokenize_inputs

        tokens = tokenize_inputs(cfg, folder, cfg.resume)
        self.text = {
            key: tokens[key]
            for key in ("inputs", "documents", "tokens", "text_bytes", "seconds", "tokenizer")
        }
        self.cfg, self.tokenizer = dataclasses.replace(
            cfg, inputs=[folder.uri], tokenizer=None
        ).tokenized()

    def check_executor(self, ex) -> None:
        check_work_reach(self.cfg, ex)

    def plan(self) -> None:
        self.cfg, self.canonical = canonical_run(self.cfg, self.tokenizer)
        cfg = self.cfg
        self.shards = plan_shards(cfg.inputs, cfg.read_options())
        self.units = plan_units(self.shards, cfg.unit_tokens)
        check_fits(cfg.work_budget, tokens_of(self.shards, self.units), cfg.unit_tokens)
        self.compile_seconds = kernels_ready()  # once here, not in every worker at once
        self.fingerprint = run_fingerprint(cfg, self.shards)
        return None

    def claim(self, staging: Location) -> bool:
        self.state = claimed_state(self.cfg, staging, self.fingerprint)
        return self.state is not None

    def stages(self, run: Run) -> dict:
        cfg = self.cfg
        plan = Plan(cfg, self.shards, self.units, run.work)
        resumed = resume_record(plan, self.state)
        executor = run.executor(release=SCRATCH.clear, tokens=tokens_of(self.shards, self.units))
        manifest = _build(
            executor, plan, run.staging, self.t_start, self.state or BuildState.fresh(cfg)
        )
        manifest.head_start_tasks = executor.in_driver
        manifest.executor_start_seconds = run.starting.seconds if run.starting else {}
        manifest.compile_seconds = self.compile_seconds
        manifest.run_fingerprint = fingerprint_digest(self.fingerprint)
        manifest.resumed = resumed
        manifest.tokenizer = self.tokenizer
        manifest.text = self.text
        manifest.canonical = self.canonical
        return manifest.to_json()

    def published(self, manifest: dict) -> None:
        if self.text_folder is not None:
            self.text_folder.remove_tree()


@dataclass
class BuildPasses(PassSteps):
    """A build's pass k: count its units, merge and keep by key range (`passes`); its
    state saved after each pass, a rerun with --resume continues after it."""

    count_label = "count"
    merge_label = "merge, keep"
    last_stage = "keep"

    ex: Any
    plan: Plan
    st: BuildState
    sweeper: Sweeper
    watching: PassBudget | None = None  # the pass's work files against --work-budget
    merged_before: int = 0  # bytes of the pass before's merged ranges, still on disk

    def count_size(self) -> tuple[int, int]:
        return len(self.plan.units), tokens_of(self.plan.shards, self.plan.units)

    def count(self, k: int, floor: int) -> tuple[dict, KeyCode]:
        st, plan = self.st, self.plan
        code = pass_code(k, plan.shards, st.kept, st.top_token)
        counting = CountStage(plan, k, st.prev, code)
        if plan.cfg.work_budget is not None:
            held = sum(  # an earlier pass's answers are swept once the next one is done
                r["bytes"]
                for j, files in st.files.items()
                for name, r in files.items()
                if not (j < k - 1 and name.startswith(f"pass{j}/answers-"))
            )
            self.watching = PassBudget(
                plan.cfg.work_budget, k, self.count_size()[1], held + self.merged_before
            )
        results = self.ex.map(
            len(plan.units), counting.run, overlap=True, progress=True, watch=self.watching
        )
        say_notes(results)
        count = counting.summary(results)
        if k == 2:
            st.totals = {"documents": count["documents"], "tokens": count["tokens"]}
            st.positions = by_length(plan.cfg.max_len, count["positions"])
            check_tokens(plan.cfg, st.totals)
            st.top_token = count["max_token"]
        return count, code

    def merge(self, k: int, floor: int, counted: tuple[dict, KeyCode]) -> Merged:
        count, code = counted
        cfg = self.plan.cfg
        nparts = max(
            self.ex.parallelism, cfg.key_ranges, math.ceil(count["distinct"] * 12 / MERGE_BYTES)
        )
        merging = MergeStage(self.plan, k, nparts, floor, code)
        merged = merging.summary(self.ex.map_batched(nparts, merging.run))
        if self.watching is not None:
            self.watching.check_merged(merged["bytes"])
        self.merged_before = merged["bytes"]
        return Merged(merged["hists"], nparts)

    def keep(
        self, k: int, threshold: int | None, counted: tuple[dict, KeyCode], merged: Merged
    ) -> tuple[int, dict]:
        assert threshold is not None  # a build's passes stop at a length that keeps none
        count, code = counted
        cfg, nparts = self.plan.cfg, merged.result
        kept_per_part = [sum(n for c, n in h.items() if c >= threshold) for h in merged.hists]
        offsets = np.concatenate([[0], np.cumsum(kept_per_part)]).astype(np.int64).tolist()
        kept = offsets[-1]
        if kept >= int(INVALID):
            raise FgramError(f"pass {k}: {kept} frequent n-grams exceed the 2**32-1 id space")
        broadcast = kept * 8 <= cfg.broadcast_budget or self.ex.shares_memory
        keeping = KeepStage(
            self.plan, k, nparts, threshold, offsets, k < cfg.max_len and not broadcast
        )
        self.st.files[k] = keeping.summary(self.ex.map_batched(nparts, keeping.run))["files"]
        self.st.offsets[k] = offsets
        self.st.prev = {"nparts": nparts, "broadcast": broadcast}
        self.st.codes[k] = [code.prefix_bits, code.last_bits]
        return kept, {
            "candidates": count["counted"],
            "distinct": count["distinct"],
            "unit_bytes": count["unit_bytes"],
            "partitions": nparts,
            "key_bits": [code.prefix_bits, code.last_bits],
            "lookup": "broadcast" if broadcast else "join",
        }

    def done(self, k: int, threshold: int, record: PassRecord) -> None:
        st = self.st
        st.threshold, st.kept = threshold, record.kept
        st.next = k + 1 if record.kept else self.plan.cfg.max_len + 1
        save_state(self.plan.work, st)  # pass k is a completed unit: a rerun continues after it
        if k > 2:  # the previous pass's per-unit files were consumed by this one
            self.sweeper.sweep(unit_files(self.plan, k - 1))


def _build(ex, plan: Plan, staging, t_start: float, st: BuildState) -> TableManifest:
    cfg = plan.cfg
    sweeper = Sweeper()
    run_passes(BuildPasses(ex, plan, st, sweeper), cfg, st.hists, st.passes, st.next, st.threshold)
    sweeper.wait()
    t0 = time.time()
    chosen = select(st.hists, cfg.size)
    plan.codes = {k: KeyCode(*bits) for k, bits in st.codes.items()}
    by_range = _decode_width(chosen.groups, st.offsets) > cfg.broadcast_budget
    select_stages = write_table(
        ex,
        plan,
        st.offsets,
        chosen.groups,
        chosen.cutoff,
        chosen.cut_len,
        chosen.size,
        staging,
        by_range,
    )
    select_record = {  # the work stays until the table is published (`finish`): a failed
        # publish resumes after the passes
        "decode": "ranges" if by_range else "broadcast",
        "seconds": round(time.time() - t0, 3),
        **select_stages,
    }
    return table_manifest(
        ex.name,
        cfg,
        plan.shards,
        st.totals,
        st.passes,
        chosen,
        select_record,
        units=len(plan.units),
        seconds=round(time.time() - t_start, 3),
        positions=st.positions,
    )


def by_length(max_len: int, summed: list[int] | None) -> dict[str, int] | None:
    """The corpus's n-gram positions per length 2..K (None: a unit counted by a version
    that did not record them)."""
    if summed is None:
        return None
    return {str(n): int(summed[n - 2]) if summed else 0 for n in range(2, max_len + 1)}


def _decode_width(groups: Groups, offsets_by_len: dict[int, list[int]]) -> int:
    """The most bytes a decode task holds with every selected (k-1)-gram's tokens (the
    broadcast decode); past the budget it goes by key range."""
    return max(
        (
            int(groups.size[groups.length == k].sum()) * (k - 1) * 4
            + offsets_by_len.get(k - 1, [0])[-1] * 8
            for k in offsets_by_len
        ),
        default=0,
    )
