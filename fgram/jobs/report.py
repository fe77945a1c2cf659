"""fgram report: one self-contained HTML page (and ``report.json``, the same numbers) of
what a table holds, how it was made and where the time went; with held-out shards, the
coverage-vs-S curve that picks S. Of a refresh folder also its versions; of an annotate
output its match-length histogram.

Everything but the coverage reads the manifest and one ordered scan of two columns of
the table (`pipeline.report`); the coverage is `fgram coverage --sizes` over the
held-out shards (Spark, or ``engine="local"``). The page and its JSON are written only
once both are whole, each aside and then renamed (one PUT on an object store).
"""

from __future__ import annotations

import os
import time
from typing import Any

from fgram.jobs.progress import PROGRESS
from fgram.pipeline.config.commands import ReportConfig
from fgram.pipeline.errors import ConfigError, InputError, OutputError
from fgram.pipeline.io.storage import Location, json_bytes
from fgram.version import __version__


def json_location(page: Location) -> Location:
    """Where a page's numbers go: beside it, its name's stem and ``.json``."""
    stem = os.path.splitext(page.name)[0] or page.name
    return page.sibling(f"{stem}.json")


def _check_outputs(cfg: ReportConfig) -> tuple[Location, Location]:
    page = cfg.output
    numbers = json_location(page)
    if page.uri == numbers.uri:
        raise ConfigError(f"-o {cfg.output}: give the page a name ending in .html")
    for loc in (page, numbers):
        info = loc.info()
        if info.type.name == "Directory":
            raise OutputError(f"{loc.uri}: is a folder; give -o a file name")
        if loc.exists() and not cfg.overwrite:
            raise OutputError(f"{loc.uri}: exists; pass --overwrite to replace it")
    return page, numbers


def _coverage(cfg: ReportConfig, manifest: dict[str, Any]) -> dict[str, Any]:
    """The coverage-vs-S curve over the held-out inputs (`fgram coverage --sizes`)."""
    from fgram.jobs.annotate import run_annotate
    from fgram.pipeline.config.commands import AnnotateConfig
    from fgram.pipeline.tables.coverage import default_sizes

    sizes = cfg.sizes if cfg.sizes is not None else default_sizes(int(manifest["fgrams"]))
    from fgram.pipeline.formats.inputs import holds_text

    # text: tokenized with this tokenizer (or the table's); token shards are read as they are
    text = holds_text(list(cfg.heldout), cfg.storage)
    options = {**cfg.coverage, "tokenizer": cfg.tokenizer if text else None}
    cov: dict[str, Any] = run_annotate(
        AnnotateConfig(
            table=cfg.table, inputs=list(cfg.heldout), sizes=sizes, storage=cfg.storage, **options
        )
    )["coverage"]
    cov["heldout"] = list(cfg.heldout)
    return cov


def build_report(cfg: ReportConfig) -> dict[str, Any]:
    """The report's numbers (what ``report.json`` holds)."""
    from fgram.pipeline.report import numbers as rp
    from fgram.pipeline.tables.versions import current, open_table
    from fgram.pipeline.text.tokenizer import table_tokenizer

    root = cfg.table
    loc, manifest = open_table(root, kinds=None)  # a table, a refresh folder or tags
    kind = manifest.get("kind")
    out: dict[str, Any] = {
        "format": rp.FORMAT,
        "version": rp.VERSION,
        "fgram_version": __version__,
        "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "source": root.uri,
    }
    if kind == "fgram-tags":
        if cfg.heldout:
            raise ConfigError(f"{root.uri}: tags have no coverage curve; report their table")
        return {**out, "kind": "tags", **rp.tags_report(loc, manifest)}
    if kind != "fgram-table":
        raise InputError(root.uri, "not an fgram table, refresh folder or annotate output")
    refresh = current(root) is not None
    tok = table_tokenizer(cfg.tokenizer, manifest)
    decode = tok.decode if tok is not None else None
    PROGRESS.stage("report: the table")
    out.update(kind="refresh" if refresh else "table")
    out.update(rp.table_report(loc, manifest, cfg.top, cfg.points, decode))
    if tok is not None:  # the tokenizer the f-grams are shown as text with
        shown = cfg.tokenizer or (manifest.get("tokenizer") or {}).get("path", "")
        out["table"]["text_by"] = os.path.basename(shown)
    if refresh:
        PROGRESS.stage("report: versions")
        out["versions"] = rp.versions_report(root, cfg.diffs)
    if cfg.heldout:
        out["coverage"] = _coverage(cfg, manifest)
    if cfg.engram:
        from fgram.audit import run_audit

        out["engram"] = run_audit(cfg.table, cfg.engram, None, cfg.storage)
    return out


def run_report(cfg: ReportConfig) -> dict[str, Any]:
    """Write the page and its JSON; returns the report, with ``written``: their URIs."""
    from fgram.pipeline.report.page import render
    from fgram.pipeline.report.plots import make_plots

    cfg.validate()
    page, numbers = _check_outputs(cfg)
    report = build_report(cfg)
    PROGRESS.stage("report: page")
    html = render(report, make_plots(report), numbers.name)
    numbers.write_bytes(json_bytes(report))
    page.write_bytes(html.encode())
    PROGRESS.end()
    return {**report, "written": {"html": page.uri, "json": numbers.uri}}
