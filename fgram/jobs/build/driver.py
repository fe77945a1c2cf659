"""The driver of `fgram build`: checks, then the pass loop (`passes`), the select stage
(`select`: decoded by broadcast, or by key range past the budget), the manifest, and
publishing (`publish.finish`), under one writer's lock."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from fgram.jobs.build.passes import (
    MERGE_BYTES,
    SCRATCH,
    CountStage,
    KeepStage,
    MergeStage,
    Plan,
    pass_code,
    unit_files,
)
from fgram.jobs.build.select import write_table
from fgram.jobs.build.state import (
    BuildState,
    check_work_reach,
    fingerprint_digest,
    prepare_staging,
    resume_record,
    run_fingerprint,
    save_state,
)
from fgram.jobs.executors import runs_here
from fgram.jobs.headstart import HeadStart, Starting
from fgram.jobs.progress import PROGRESS
from fgram.pipeline.config import BuildConfig
from fgram.pipeline.errors import FgramError, StorageUnavailable, keeps_work
from fgram.pipeline.formats.inputs import (
    check_inputs,
    plan_shards,
    plan_units,
    shard_record,
    tokens_of,
)
from fgram.pipeline.formats.table import table_record
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.locks import OutputLock
from fgram.pipeline.io.publish import check_output, finish, staging_for
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import Sweeper
from fgram.pipeline.kernels.keys import INVALID, KeyCode
from fgram.pipeline.kernels.ranking import Groups
from fgram.pipeline.kernels.selection import add_length, selection
from fgram.pipeline.kernels.warmup import warm_up
from fgram.pipeline.records import PassRecord, TableManifest


def run_build(cfg: BuildConfig, spark=None) -> dict:
    """Run `fgram build`; returns the manifest. Raises FgramError subclasses on bad input.

    ``cfg.engine == "local"`` runs the same tasks in forked processes without
    Spark (for measuring Spark's cost); otherwise ``spark`` (or a session built
    from ``cfg.master``/``cfg.conf``) runs them.
    """
    t_start = time.time()
    cfg.validate()
    if cfg.tokenizer:
        from fgram.pipeline.formats.names import TEXT_FILES, is_text_file

        check_inputs(cfg.inputs, cfg.storage, is_text_file, TEXT_FILES)
        return _build_from_text(cfg, spark, t_start)
    check_inputs(cfg.inputs, cfg.storage)  # a missing input: said before the JVM starts
    return _build_table(cfg, spark, t_start)


def _build_table(
    cfg: BuildConfig, spark, t_start: float, text: dict | None = None, out: Location | None = None
) -> dict:
    """``out``: the output, checked already (else checked here)."""
    cfg, tokenizer = cfg.tokenized()  # `fgram tokenize` outputs say how to read them
    if out is None:
        out = check_output(cfg.output, cfg.overwrite, cfg.storage, cfg.resume)
    with OutputLock(out):
        return _run_locked(cfg, spark, out, t_start, tokenizer, text)


def _build_from_text(cfg: BuildConfig, spark, t_start: float) -> dict:
    """Tokenize the text inputs into a folder of the run (``.TABLE.fgram-text``, beside
    its staging folder), then build from those shards. The folder goes once the table is
    published; a failed run keeps it for --resume."""
    from fgram.jobs.tokenize import tokenize_inputs

    out = check_output(cfg.output, cfg.overwrite, cfg.storage, cfg.resume)  # before the work
    assert cfg.tokenizer is not None
    folder = staging_for(out, runs_here(cfg), what="text")
    where = folder if isinstance(folder, str) else folder.uri
    tokens = tokenize_inputs(cfg, where, cfg.resume)
    text = {
        key: tokens[key]
        for key in ("inputs", "documents", "tokens", "text_bytes", "seconds", "tokenizer")
    }
    manifest = _build_table(
        dataclasses.replace(cfg, inputs=[where], tokenizer=None), spark, t_start, text, out
    )
    wf.remove_tree(folder)
    return manifest


def _run_locked(
    cfg: BuildConfig, spark, out: Location, t_start: float, tokenizer=None, text=None
) -> dict:
    # Spark's JVM starts (seconds, about one core) while the driver plans, loads
    # the kernels and counts pass-2 units itself on the other core
    starting = Starting(cfg, spark, check=lambda ex: check_work_reach(cfg, ex))
    staging = None
    try:
        shards = plan_shards(cfg.inputs, cfg.read_options())
        units = plan_units(shards, cfg.unit_tokens)
        warm_up()  # compile (or load) the kernels once here, not in every worker at once
        fingerprint = run_fingerprint(cfg, shards)
        staging, state = prepare_staging(cfg, out, fingerprint)
        plan = Plan(cfg, shards, units, wf.join(staging, "_work"))
        resumed = resume_record(plan, state)
    except BaseException as exc:
        starting.wait()  # the input's error is the one to report
        if staging and not keeps_work(exc):
            wf.remove_tree(staging)
        raise
    try:
        executor = HeadStart(starting, cfg.master, release=SCRATCH.clear)
        manifest = _build(executor, plan, staging, t_start, state or BuildState.fresh(cfg))
        manifest.head_start_tasks = executor.in_driver
        manifest.executor_start_seconds = starting.seconds
        manifest.run_fingerprint = fingerprint_digest(fingerprint)
        manifest.resumed = resumed
        manifest.tokenizer = tokenizer
        manifest.text = text
        record = manifest.to_json()
        finish(staging, out, record)
        starting.wait()  # a warm-up job still running would be cut off at exit, noisily
        PROGRESS.end()  # the last stage's line
        return record
    except BaseException as exc:
        where = getattr(staging, "uri", staging)
        if not keeps_work(exc):
            wf.remove_tree(staging)
        elif isinstance(exc, StorageUnavailable):  # one line: the cause, then what is kept
            raise StorageUnavailable(
                f"{exc}; the completed passes are kept in {where}: "
                f"rerun with --resume once it answers"
            ) from None
        else:  # for the command line's one line (cli.main)
            exc.fgram_kept = (  # type: ignore[attr-defined]
                f"the completed passes are kept in {where}: rerun with --resume to continue"
            )
        raise


def _build(ex, plan: Plan, staging, t_start: float, st: BuildState) -> TableManifest:
    cfg, shards, units, work = plan.cfg, plan.shards, plan.units, plan.work
    hists, offsets_by_len = st.hists, st.offsets
    k = st.next
    sweeper = Sweeper()
    while k <= cfg.max_len:
        t0 = time.time()
        floor = threshold = st.threshold
        code = pass_code(k, shards, st.kept, st.top_token)
        prev = st.prev
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: count", len(units), tokens_of(shards, units))
        counting = CountStage(plan, k, prev, code)
        count = counting.summary(ex.map(len(units), counting.run, overlap=True, progress=True))
        t_count = time.time()
        PROGRESS.stage(f"pass {k}/{cfg.max_len}: merge, keep")
        if k == 2:
            st.totals = {"documents": count["documents"], "tokens": count["tokens"]}
            if st.totals["tokens"] == 0:
                raise FgramError(f"{', '.join(cfg.inputs)}: input holds no tokens")
            st.top_token = count["max_token"]
        distinct = count["distinct"]
        nparts = max(ex.parallelism, cfg.key_ranges, math.ceil(distinct * 12 / MERGE_BYTES))
        merging = MergeStage(plan, k, nparts, floor, code)
        part_hists = merging.summary(ex.map_batched(nparts, merging.run))["hists"]
        t_merge = time.time()
        threshold = add_length(hists, k, part_hists, cfg.size, threshold)
        kept_per_part = [sum(n for c, n in h.items() if c >= threshold) for h in part_hists]
        offsets = np.concatenate([[0], np.cumsum(kept_per_part)]).astype(np.int64).tolist()
        offsets_by_len[k] = offsets
        kept = offsets[-1]
        if kept >= int(INVALID):
            raise FgramError(f"pass {k}: {kept} frequent n-grams exceed the 2**32-1 id space")
        broadcast = kept * 8 <= cfg.broadcast_budget or ex.name == "local"
        answer = k < cfg.max_len and not broadcast
        keeping = KeepStage(plan, k, nparts, threshold, offsets, answer)
        ex.map_batched(nparts, keeping.run)
        st.passes.append(
            PassRecord(
                length=k,
                count_threshold=floor,
                threshold=threshold,
                candidates=count["counted"],
                distinct=distinct,
                kept=kept,
                partitions=nparts,
                key_bits=[code.prefix_bits, code.last_bits],
                lookup="broadcast" if broadcast else "join",
                seconds=round(time.time() - t0, 3),
                stages={
                    "count": round(t_count - t0, 3),
                    "merge": round(t_merge - t_count, 3),
                    "keep": round(time.time() - t_merge, 3),
                },
            )
        )
        st.threshold, st.kept = threshold, kept
        st.prev = {"nparts": nparts, "broadcast": broadcast}
        st.next = k + 1 if kept else cfg.max_len + 1
        st.codes[k] = [code.prefix_bits, code.last_bits]
        save_state(work, st)  # pass k is a completed unit: a rerun continues after it
        if k > 2:  # the previous pass's per-unit files were consumed by this one
            sweeper.sweep(unit_files(plan, k - 1))
        k = st.next
    sweeper.wait()
    totals, passes = st.totals, st.passes
    t0 = time.time()
    PROGRESS.stage("select")
    plan.codes = {k: KeyCode(*bits) for k, bits in st.codes.items()}
    cutoff, cut_len, selected, by_len = selection(hists, cfg.size)
    groups = Groups(hists, cutoff, cut_len)
    # the decode of length k holds every selected (k-1)-gram's tokens in each task;
    # past the budget it goes by key range
    widest = max(
        (
            int(groups.size[groups.length == k].sum()) * (k - 1) * 4
            + offsets_by_len.get(k - 1, [0])[-1] * 8
            for k in offsets_by_len
        ),
        default=0,
    )
    by_range = widest > cfg.broadcast_budget
    select_stages = write_table(
        ex, plan, offsets_by_len, groups, cutoff, cut_len, selected, staging, by_range
    )
    wf.remove_tree(work)
    return TableManifest(
        engine=ex.name,
        config=cfg.record(),
        inputs=[shard_record(s) for s in shards],
        units=len(units),
        totals=totals,
        passes=passes,
        cutoff_count=cutoff if selected else None,
        fgrams=selected,
        by_length={str(k): n for k, n in sorted(by_len.items())},
        select={
            "decode": "ranges" if by_range else "broadcast",
            "seconds": round(time.time() - t0, 3),
            **select_stages,
        },
        seconds=round(time.time() - t_start, 3),
        table=table_record(),
    )
