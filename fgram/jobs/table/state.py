"""What a build run keeps between passes and across runs: its staging folder (work
files, then the table before it is published), its fingerprint (options and inputs:
a rerun may reuse the work only if equal) and the driver's state after each
completed pass (for --resume)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from fgram.jobs.engines import runs_here
from fgram.jobs.table.passes import Plan, count_markers
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.publish import staging_for
from fgram.pipeline.io.storage import Location, check_bucket
from fgram.pipeline.io.workdir import claim_staging, load_json, save_json
from fgram.pipeline.records import JsonRecord, PassRecord, int_keys


def claimed_state(cfg: BuildConfig, staging: Location, fingerprint: dict) -> BuildState | None:
    """The staging folder claimed (`claim_staging`) and, with --resume, the state of a
    previous run to continue (None: a fresh run).

    Leftovers of an unfinished run are removed unless --resume finds that they
    belong to this very run (same options, same inputs); then its completed
    passes and counted units are kept.
    """
    if claim_staging(staging, fingerprint, cfg.resume):
        work = staging.child("_work")
        state = load_state(work)
        if state is not None and (bad := damaged(work, state)):
            sys.stderr.write(
                f"fgram: warning: {bad}: not as it was written; the passes are counted again\n"
            )
            for k in range(2, cfg.max_len + 2):  # nothing of the passes is trusted
                work.child(f"pass{k}").remove_tree()
            state = None
        return state or BuildState.fresh(cfg)
    return None


def damaged(work: Location, state: BuildState) -> str | None:
    """The first of the completed passes' kept files that is not as it was written (a
    killed run's, which may have changed since); None when every one is whole."""
    for files in state.files.values():
        for name, record in files.items():
            path = work.child(*name.split("/"))
            if not wf.intact(path, record):
                return path.uri
    return None


def work_location(cfg: BuildConfig, out: Location) -> Location:
    """Where a run's staging folder is (its work files and state, then the table before
    it is published): in ``--work-dir`` when given; beside a local output;
    for an output on an object store, this machine's cache when the tasks run here
    (local mode, --engine local), else the object store itself, beside the output (a
    `Location` every executor reaches: a cluster without a shared mount)."""
    if cfg.work_dir:
        import hashlib

        where = cfg.work_dir
        check_bucket(where)
        name = f".{out.name}-{hashlib.sha256(out.uri.encode()).hexdigest()[:12]}.fgram-staging"
        return where.child(name)
    return staging_for(out, runs_here(cfg))


def resume_record(plan: Plan, state: BuildState | None) -> dict | None:
    if state is None:
        return None
    k = state.next
    done = count_markers(plan.work, k).count(len(plan.units)) if k <= plan.cfg.max_len else 0
    return {"from_pass": k, "units_counted_before": done}


STATE_FORMAT = 1  # state.json's layout: a resumed run reads only its own format


@dataclass
class BuildState(JsonRecord):
    """What the driver knows between passes, saved after each (``_work/state.json``):
    a resumed run continues from it."""

    FORMAT = STATE_FORMAT

    next: int  # the next pass's length (max_len + 1: every pass is done)
    threshold: int  # the count an n-gram needs to be kept, so far
    hists: dict[int, dict[int, int]] = field(default_factory=dict)  # length -> count -> n
    passes: list[PassRecord] = field(default_factory=list)  # the manifest's pass records
    prev: dict | None = None  # the last pass's key ranges and lookup path
    offsets: dict[int, list[int]] = field(default_factory=dict)  # length -> first id per range
    codes: dict[int, list[int]] = field(default_factory=dict)  # length -> its key code's bits
    totals: dict[str, int] = field(default_factory=lambda: {"documents": 0, "tokens": 0})
    positions: dict[str, int] | None = None  # n-gram positions per length (after pass 2)
    top_token: int | None = None  # the largest token id read (after pass 2)
    kept: int | None = None  # frequent n-grams of the last pass
    files: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)  # pass -> its
    # kept files (by name in the work folder) -> their records (`workdir.save_array`)

    @classmethod
    def fresh(cls, cfg: BuildConfig) -> BuildState:
        return cls(next=2, threshold=cfg.min_count)

    @classmethod
    def restore(cls, values: dict) -> dict:
        return {
            **values,
            "hists": {int(k): int_keys(h) for k, h in values["hists"].items()},
            "offsets": int_keys(values["offsets"]),
            "codes": int_keys(values["codes"]),
            "files": int_keys(values.get("files", {})),
            "passes": [PassRecord.from_json(p) for p in values["passes"]],
        }


def save_state(work: Location, st: BuildState) -> None:
    save_json(work.child("state.json"), st.to_json())


def load_state(work: Location) -> BuildState | None:
    """The state after the last completed pass, or None."""
    path = work.child("state.json")
    return BuildState.from_json(load_json(path)) if wf.exists(path) else None
