"""fgram refresh: publish a new version of a table for a new input list (scheduled refreshes).

    fgram refresh OUT INPUT... [build options] [--keep N]

The input list is the whole new corpus (old shards, plus new ones, minus
removed ones). If it and the options fingerprint the same as the current
version's (every shard's size, mtime and content checksum), nothing is done.
Otherwise the table is built into ``OUT/versions/<id>/`` exactly as `fgram
build` would, ``OUT/current`` is switched to it atomically, and versions
beyond the newest ``--keep`` are deleted (never the current one).

Each new version is a full build today: per-shard partial counts are not yet
reused, so a refresh costs a rebuild (see the README).
"""
from __future__ import annotations

import dataclasses
import os
import sys

from fgram.jobs.build import fingerprint_digest, run_build, run_fingerprint
from fgram.pipeline import versions as vs
from fgram.pipeline.config import BuildConfig
from fgram.pipeline.inputs import plan_shards
from fgram.pipeline.publish import OutputLock
from fgram.pipeline.workdir import load_json


def run_refresh(cfg: BuildConfig, keep: int = 3, spark=None) -> dict:
    """Refresh the versioned table at ``cfg.output``; returns a summary (and the new
    version's manifest under "manifest" when one was built)."""
    cfg.validate()
    vs.check_keep(keep)         # before building, not after
    root = vs.check_root(cfg.output)
    with OutputLock(root):
        previous = vs.current(root)
        digest = fingerprint_digest(run_fingerprint(cfg, plan_shards(cfg.inputs, cfg.read_options())))
        if previous is not None:
            old = load_json(os.path.join(vs.version_path(root, previous), "manifest.json"))
            if old.get("run_fingerprint") == digest:
                return {"version": previous, "previous": previous, "built": False,
                        "pruned": vs.prune(root, keep)}
        vid = vs.new_version_id()
        manifest = run_build(dataclasses.replace(cfg, output=vs.version_path(root, vid),
                                                 overwrite=False, resume=False), spark=spark)
        vs.switch_current(root, vid)
        return {"version": vid, "previous": previous, "built": True,
                "pruned": vs.prune(root, keep), "manifest": manifest}


def main(argv=None) -> None:
    """Entry point for `spark-submit fgram/jobs/refresh.py OUT INPUT...` (the CLI's options)."""
    from fgram.cli import cli
    cli.main(args=["refresh", *(sys.argv[1:] if argv is None else argv)], prog_name="refresh.py")


if __name__ == "__main__":
    main()
