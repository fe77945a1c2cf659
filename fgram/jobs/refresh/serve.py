"""What the current version serves, carried to the next before ``current`` switches: its
index, rebuilt for the new table, and its embeddings, made with the model the refresh
was given (``--model``: no code that a data file names runs) and the row type, chunking
and device that ``embeddings.json`` records: the rows of f-grams the current version
holds too copied from it when the model is the one it records (`EmbedConfig.reuse`),
only the new ones computed. Lookups and the inference store work through ``current``
the moment it points at the new version."""

from __future__ import annotations

from typing import Any

from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.tables import versions as vs
from fgram.pipeline.tables.embed import model_factory


def check_model(root: Any, previous: str, model: str | None) -> None:
    """A current version with embeddings needs the model that embeds the next one named
    by the user (``--model``): never the module a data file (``embeddings.json``)
    names, which anyone who can write the table could change."""
    meta = as_location(vs.version_path(root, previous)).child("embeddings", "embeddings.json")
    if model is None and meta.exists():
        recorded = meta.read_json().get("model")
        raise ConfigError(
            f"{meta.uri}: the current version has embeddings (made with {recorded!r}): give "
            f"the model that embeds the new version, --model module:factory (refresh runs "
            f"no code that a data file names)"
        )
    if model is not None:
        model_factory(model)  # a wrong one said before anything is counted


def carry_serving(
    cfg: BuildConfig,
    root: Any,
    previous: str | None,
    vid: str,
    spark: Any,
    model: str | None = None,
) -> list[str]:
    """Index and embed version ``vid`` as ``previous`` was; returns what was carried
    (``index``, ``embeddings``). A failure here leaves ``current`` where it was."""
    if previous is None:
        return []
    old = as_location(vs.version_path(root, previous))
    new = as_location(vs.version_path(root, vid))
    carried = []
    if old.child("index", "index.json").exists():
        from fgram.pipeline.tables.index import write_index

        write_index(new, cfg.storage)
        carried.append("index")
    if old.child("embeddings", "embeddings.json").exists():
        from fgram.jobs.embed import run_embed
        from fgram.pipeline.config.commands import EmbedConfig

        meta = old.child("embeddings", "embeddings.json").read_json()
        assert model is not None  # `check_model`, before the version was counted
        run_embed(
            EmbedConfig(
                table=new,
                model=model,
                float=meta["dtype"],
                chunk_rows=int(meta["chunk_rows"]),
                device=meta.get("device"),
                engine=cfg.engine,
                master=cfg.master,
                conf=dict(cfg.conf),
                storage=dict(cfg.storage),
                reuse=old,  # the rows of the f-grams both versions hold are copied
            ),
            spark,
        )
        carried.append("embeddings")
    return carried
