"""What the jobs that count share: a run's fingerprint (what its work depends on), the
check that a cluster's executors reach the work folder, and a worker's work arrays."""

from __future__ import annotations

from fgram.jobs.engines import runs_here
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.inputs import shard_record
from fgram.pipeline.kernels.scratch import Scratch
from fgram.version import __version__

SCRATCH = Scratch()  # a worker's count tasks reuse its work arrays


# options a run's intermediates do not depend on: where and how it runs, and the inputs
# as spelled (a fingerprint holds the files they resolve to: a path spelled otherwise, a
# relative one from another folder, is the same input)
NOT_FINGERPRINTED = (
    "inputs",
    "output",
    "overwrite",
    "resume",
    "engine",
    "master",
    "conf",
    "storage",
    "tokenizer_backend",  # proven to give the same ids: a resume may change it
)


def run_fingerprint(cfg: BuildConfig, shards) -> dict:
    """What a run's intermediates depend on: a rerun may reuse them only if it is equal."""
    rec = cfg.record()
    for key in (*NOT_FINGERPRINTED, "work_dir", "work_budget", "strict"):
        rec.pop(key, None)
    return {
        "fgram_version": __version__,
        "config": rec,
        "inputs": [shard_record(s) for s in shards],
    }


def fingerprint_digest(fingerprint: dict) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:32]


def check_work_reach(cfg: BuildConfig, ex) -> None:
    """A run whose work files `work_location` put on this machine's disk (an object-store
    output, tasks judged to run here) never sends a task to a cluster's executors, which
    cannot reach them: refused before any task runs there."""
    if not cfg.output.local and ex.remote and runs_here(cfg) and not cfg.work_dir:
        raise ConfigError(
            f"{cfg.output}: this run keeps its work files on this machine, which "
            f"executors of {ex.sc.master} cannot reach; give the cluster's master "
            f"with --master"
        )
