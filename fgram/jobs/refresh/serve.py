"""What the current version serves, carried to the next before ``current`` switches: its
index, rebuilt for the new table, and its embeddings, made with the model (and row
type, chunking and device) that ``embeddings.json`` records: the rows of f-grams the
current version holds too copied from it (`EmbedConfig.reuse`), only the new ones
computed. Lookups and the inference store work through ``current`` the moment it points
at the new version."""

from __future__ import annotations

from typing import Any

from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.tables import versions as vs


def carry_serving(
    cfg: BuildConfig, root: Any, previous: str | None, vid: str, spark: Any
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
        run_embed(
            EmbedConfig(
                table=new.uri,
                model=meta["model"],
                float=meta["dtype"],
                chunk_rows=int(meta["chunk_rows"]),
                device=meta.get("device"),
                engine=cfg.engine,
                master=cfg.master,
                conf=dict(cfg.conf),
                storage=dict(cfg.storage),
                reuse=old.uri,  # the rows of the f-grams both versions hold are copied
            ),
            spark,
        )
        carried.append("embeddings")
    return carried
