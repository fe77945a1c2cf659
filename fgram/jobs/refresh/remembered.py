"""A refresh folder remembers the options that shape its table: those its current
version was built with (its manifest's ``config``). A later run that does not give one
takes it; one that gives another value is refused unless it says ``rebuild`` (then the
store starts afresh with the new options, and nothing older is pruned by that run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from fgram.jobs.refresh.store import STORE_OPTIONS
from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.io.workdir import load_json
from fgram.pipeline.tables import versions as vs

FLAGS = {"max_len": "-K/--max-len", "size": "-S/--size"}  # the rest: --name-with-dashes


def _flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def settle_options(
    cfg: BuildConfig,
    recorded: dict[str, Any],
    given: Collection[str] | None,
    rebuild: bool,
    where: str,
) -> tuple[BuildConfig, bool]:
    """(the run's config, whether it rebuilds because its options differ). ``recorded``:
    the current version's config; ``given``: the option names the caller set (None: all
    of them, as a config made by hand says every value)."""
    defaults = {f.name: f.default for f in dataclasses.fields(BuildConfig)}
    taken, differ = {}, []
    for name in (*STORE_OPTIONS, "canonical"):
        if name not in recorded:
            continue
        now, then = getattr(cfg, name), recorded[name]
        if now == then:
            continue
        if (given is not None and name not in given) and now == defaults.get(name):
            taken[name] = then
        else:
            differ.append(f"{_flag(name)} {then} -> {now}")
    if differ and not rebuild:
        raise ConfigError(
            f"{where}: its current version was built with other options "
            f"({'; '.join(differ)}); run without them to keep the table's, or pass "
            f"--rebuild to start it afresh with these (older versions are kept)"
        )
    return dataclasses.replace(cfg, **taken), bool(differ)


def same_map(
    cfg: BuildConfig, old: dict[str, Any], rebuilt: bool, tokenizer: dict | None
) -> tuple[BuildConfig, dict | None]:
    """The run's config with its canonical map (`canonical_run`) and the map's record,
    which must be the current version's (manifest ``old``; none for the first) unless
    the run rebuilds."""
    from fgram.jobs.passes import canonical_run

    cfg, canonical = canonical_run(cfg, tokenizer)
    if old and not rebuilt:
        then = (old.get("canonical") or {}).get("sha256")
        if then != (canonical or {}).get("sha256"):
            raise ConfigError(
                f"{cfg.output}: its current version was counted under another canonical "
                f"map (sha256 {str(then)[:12]}); pass --rebuild to start it afresh under "
                "this one"
            )
    return cfg, canonical


@dataclass
class Current:
    """A run's config settled against the refresh folder's current version: that
    version's id and manifest (None, None for the first), whether the options differ."""

    cfg: BuildConfig
    previous: str | None
    manifest: dict[str, Any] | None
    rebuilt: bool


def settled(
    cfg: BuildConfig, root, given: Collection[str] | None, rebuild: bool, where: str
) -> Current:
    """The current version read once, the run's options settled against its
    (`remembered.settle_options`)."""
    previous = vs.current(root)
    if previous is None:
        return Current(cfg, None, None, False)
    old = load_json(vs.version_path(root, previous).child("manifest.json"))
    cfg, rebuilt = settle_options(cfg, old.get("config", {}), given, rebuild, where)
    return Current(cfg, previous, old, rebuilt)
