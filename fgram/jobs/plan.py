"""``--dry-run`` of build and refresh: the plan, from metadata alone (no token read, no
lock taken, nothing written): the inputs, their bytes and (flat files) tokens, the
units the count stage would run, the options the run would use; for a refresh also
whether it would build at all, which shards it would count (new), reuse (kept) and
subtract (removed), and whether the store would be reused or started afresh."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fgram.jobs.budget import work_estimate
from fgram.jobs.refresh.store import STORE_OPTIONS, store_code
from fgram.jobs.runs import fingerprint_digest, run_fingerprint
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.inputs import plan_shards, plan_units
from fgram.pipeline.formats.reading import Shard

FLAT = ("flat",)  # formats whose item count is their token count


def _inputs(cfg: BuildConfig, shards: list[Shard]) -> dict[str, Any]:
    tokens = [s.n_items for s in shards if s.format in FLAT]
    return {
        "files": len(shards),
        "bytes": sum(s.size for s in shards),
        "tokens": sum(tokens) if len(tokens) == len(shards) else None,  # None: not all flat
        "units": len(plan_units(shards, cfg.unit_tokens)),
        "passes": cfg.max_len - 1,
    }


def plan_build(cfg: BuildConfig) -> dict[str, Any]:
    """What `fgram build` would do."""
    cfg.validate()
    if cfg.tokenizer:
        raise ConfigError(
            "--dry-run plans token inputs; for text, plan `fgram tokenize` first (or run "
            "the build: its tokenize stage says what it reads)"
        )
    cfg, _ = cfg.tokenized()
    shards = plan_shards(cfg.inputs, cfg.read_options())
    options = {k: getattr(cfg, k) for k in STORE_OPTIONS}
    inputs = _inputs(cfg, shards)
    # the estimate --work-budget is held to before a run (None: tokens not known unread)
    need = None if inputs["tokens"] is None else work_estimate(inputs["tokens"], cfg.unit_tokens)
    return {"would": "build", "options": options, **inputs, "work_bytes_estimate": need}


def plan_refresh(
    cfg: BuildConfig, given: Collection[str] | None = None, rebuild: bool = False
) -> dict[str, Any]:
    """What `fgram refresh` would do: its options settled, its changes and its store
    judged by the run's own functions (`refresh.driver`)."""
    from fgram.jobs.refresh.driver import Changes, reusable_store
    from fgram.jobs.refresh.remembered import settled

    cfg.validate()
    cfg, _ = cfg.tokenized()
    root = cfg.output
    current = settled(cfg, root, given, rebuild, root.uri)  # a missing folder: no version
    cfg, previous = current.cfg, current.previous
    shards = plan_shards(cfg.inputs, cfg.read_options())
    plan: dict[str, Any] = {
        "current": previous,
        "options": {k: getattr(cfg, k) for k in STORE_OPTIONS},
        **_inputs(cfg, shards),
    }
    digest = fingerprint_digest(run_fingerprint(cfg, shards))
    if current.manifest is not None and current.manifest.get("run_fingerprint") == digest:
        return {**plan, "would": "nothing (unchanged)", "new": [], "kept": [], "removed": 0}
    stored = reusable_store(root, previous, cfg, store_code(shards)) if previous else None
    changes = Changes.of(shards, stored.shards if stored is not None else {})
    new = [shards[i] for i in changes.new_idx]
    plan.update(
        would="build the first version" if previous is None else "build a new version",
        store="reused" if stored is not None else "started afresh",
        new=[s.uri for s in new],
        kept=[shards[i].uri for i in changes.kept_idx],
        removed=len(changes.removed),
        units_to_count=len(plan_units(new, cfg.unit_tokens)),
    )
    return plan
