"""``--dry-run`` of build and refresh: the plan, from metadata alone (no token read, no
lock taken, nothing written): the inputs, their bytes and (flat files) tokens, the
units the count stage would run, the options the run would use; for a refresh also
whether it would build at all, which shards it would count (new), reuse (kept) and
subtract (removed), and whether the store would be reused or started afresh."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from fgram.jobs.refresh.remembered import settle_options
from fgram.jobs.refresh.store import STORE_OPTIONS, StoreRecord, shard_digest
from fgram.jobs.runs import fingerprint_digest, run_fingerprint
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.inputs import plan_shards, plan_units
from fgram.pipeline.formats.reading import Shard
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.io.storage import locate
from fgram.pipeline.tables import versions as vs

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
    return {"would": "build", "options": options, **_inputs(cfg, shards)}


def plan_refresh(
    cfg: BuildConfig, given: Collection[str] | None = None, rebuild: bool = False
) -> dict[str, Any]:
    """What `fgram refresh` would do (its options settled as the run would settle them)."""
    cfg.validate()
    cfg, _ = cfg.tokenized()
    root = locate(cfg.output, cfg.storage)
    previous = vs.current(root) if root.exists() else None
    old: dict[str, Any] = {}
    rebuilt = False
    if previous is not None:
        old = as_location(vs.version_path(root, previous)).child("manifest.json").read_json()
        cfg, rebuilt = settle_options(cfg, old.get("config", {}), given, rebuild, root.uri)
    shards = plan_shards(cfg.inputs, cfg.read_options())
    plan: dict[str, Any] = {
        "current": previous,
        "options": {k: getattr(cfg, k) for k in STORE_OPTIONS},
        **_inputs(cfg, shards),
    }
    if previous is not None and old.get("run_fingerprint") == fingerprint_digest(
        run_fingerprint(cfg, shards)
    ):
        return {**plan, "would": "nothing (unchanged)", "new": [], "kept": [], "removed": 0}
    stored = None
    if previous is not None and not rebuilt:
        store_path = as_location(vs.version_path(root, previous)).child("store.json")
        stored = StoreRecord.from_json(store_path.read_json()) if store_path.exists() else None
    known = stored.shards if stored is not None else {}
    digests = [shard_digest(s) for s in shards]
    new = [s for s, d in zip(shards, digests, strict=True) if d not in known]
    plan.update(
        would="build the first version" if previous is None else "build a new version",
        store="reused" if stored is not None else "started afresh",
        new=[s.uri for s in new],
        kept=[s.uri for s, d in zip(shards, digests, strict=True) if d in known],
        removed=len(set(known) - set(digests)),
        units_to_count=len(plan_units(new, cfg.unit_tokens)),
    )
    return plan
