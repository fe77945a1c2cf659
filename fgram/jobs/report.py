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
from dataclasses import dataclass, field
from typing import Any

from fgram.jobs.progress import PROGRESS
from fgram.pipeline.errors import ConfigError, InputError, OutputError
from fgram.pipeline.io.publish import as_location
from fgram.pipeline.io.storage import Location, json_bytes
from fgram.version import __version__


@dataclass
class ReportConfig:
    table: str  # a build output, a refresh folder or an annotate output
    output: str = "report.html"  # the page; its numbers go beside it as <stem>.json
    heldout: list[str] = field(default_factory=list)  # shards (or text) for the coverage
    sizes: list[int] | None = None  # the coverage's grid of S (None: `default_sizes`)
    tokenizer: str | None = None  # f-grams as text; tokenizes held-out text
    top: int = 10  # f-grams listed per length
    points: int = 64  # ranks per length on the rank-frequency curves
    diffs: bool = True  # a refresh folder: the diff of each version from the one before
    overwrite: bool = False
    storage: dict[str, str] = field(default_factory=dict)
    # how the held-out shards are read and the coverage runs: `AnnotateConfig`'s fields
    # (dtype, doc_sep, column, engine, master, conf, unit_tokens, strict, text_field, ...)
    coverage: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> ReportConfig:
        if self.top < 0:
            raise ConfigError(f"--top must be >= 0, got {self.top}")
        if self.points < 2:
            raise ConfigError(f"points must be >= 2, got {self.points}")
        if self.sizes is not None and not self.heldout:
            raise ConfigError("--sizes sets the coverage curve's grid: give --heldout shards")
        return self


def json_location(page: Location) -> Location:
    """Where a page's numbers go: beside it, its name's stem and ``.json``."""
    stem = os.path.splitext(page.name)[0] or page.name
    return page.sibling(f"{stem}.json")


def _check_outputs(cfg: ReportConfig) -> tuple[Location, Location]:
    page = as_location(cfg.output, cfg.storage)
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


def _heldout_text(paths: list[str], storage: dict[str, str]) -> bool:
    """Whether the held-out inputs are text to tokenize: JSON Lines or .txt files by their
    names (Parquet is read as token shards; tokenize Parquet text first)."""
    from fgram.pipeline.formats.inputs import discover
    from fgram.pipeline.formats.names import TEXT_FILES, is_text_file, text_kind

    try:
        files = discover(paths, storage, known=is_text_file, what=TEXT_FILES)
    except InputError:
        return False
    kinds = {(text_kind(uri) or ("", None))[0] for _, _, uri in files}
    return bool(kinds) and "parquet" not in kinds


def _coverage(cfg: ReportConfig, manifest: dict[str, Any]) -> dict[str, Any]:
    """The coverage-vs-S curve over the held-out inputs (`fgram coverage --sizes`)."""
    from fgram.jobs.annotate import AnnotateConfig, run_annotate
    from fgram.pipeline.tables.coverage import default_sizes

    sizes = cfg.sizes if cfg.sizes is not None else default_sizes(int(manifest["fgrams"]))
    options = dict(cfg.coverage)
    if _heldout_text(cfg.heldout, cfg.storage):
        tok = cfg.tokenizer or (manifest.get("tokenizer") or {}).get("path")
        if not tok or not os.path.exists(tok):
            raise ConfigError("--heldout holds text: give the tokenizer (--tokenizer)")
        options["tokenizer"] = tok
    cov: dict[str, Any] = run_annotate(
        AnnotateConfig(
            table=cfg.table, inputs=list(cfg.heldout), sizes=sizes, storage=cfg.storage, **options
        )
    )["coverage"]
    cov["heldout"] = list(cfg.heldout)
    return cov


def build_report(cfg: ReportConfig) -> dict[str, Any]:
    """The report's numbers (what ``report.json`` holds)."""
    from fgram.pipeline.formats.tokenizer import table_tokenizer
    from fgram.pipeline.report import numbers as rp
    from fgram.pipeline.tables.versions import current, open_table

    root = as_location(cfg.table, cfg.storage)
    loc, manifest = open_table(root)
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
