"""`fgram report`: a table's page (and its numbers as JSON)."""

from __future__ import annotations

import click

from fgram.cli.options import config_options
from fgram.cli.results import finished, json_option
from fgram.pipeline.config.commands import AnnotateConfig, ReportConfig

# how the held-out shards are read, and where the coverage runs (`AnnotateConfig`'s)
HELDOUT_READING = (
    "column",
    "dtype",
    "doc_sep",
    "samples_are_documents",
    "strict",
    "engine",
    "unit_tokens",
    "master",
    "conf",
    "text_field",
    "tokenizer_backend",
    "doc_per_line",
)


@click.command("report", short_help="One HTML page of a table: what it holds, how, which S.")
@click.argument("table", metavar="TABLE")
@config_options(ReportConfig, exclude=("table",))
@config_options(AnnotateConfig, only=HELDOUT_READING)
@json_option
def report_command(table, **opts):
    """Write one self-contained HTML page of TABLE (plots inlined: it opens offline)
    and its numbers as JSON beside it: f-grams per length, rank-frequency per length,
    the pass funnel with its thresholds, time per pass and stage, the cutoff count and
    the top f-grams per length (as text when a tokenizer is known); with --heldout, the
    coverage-vs-S curve that picks S; with --engram, the collision audit of an Engram
    configuration (`fgram engram-audit`) of a table built with --canonical. TABLE may
    be a refresh folder (its versions and their diffs too) or an annotate output (its
    match-length histogram). Plots need matplotlib: pip install 'fgram[report]'.

    \b
    fgram report fgrams -o fgrams.html
    fgram report fgrams --heldout heldout/ --dtype uint16 --doc-sep 0 --sizes 100K,1M,10M
    fgram report fgrams --heldout heldout.jsonl.zst --tokenizer tokenizer.json
    fgram report fgrams-canonical --engram engram.toml -o engram.html  # --canonical
    """
    from fgram.cli.options import shown
    from fgram.jobs.report import run_report

    coverage = {name: opts.pop(name) for name in HELDOUT_READING}
    rep = run_report(ReportConfig(table=table, coverage=coverage, **opts))
    from fgram.pipeline.report.plots import PLOTS_MISSING, plots_available

    if not plots_available():
        click.echo(f"fgram: warning: {PLOTS_MISSING}", err=True)
    html, numbers = shown(rep["written"]["html"]), shown(rep["written"]["json"])
    finished(
        [f"report of {rep['source']} -> {html}", f"  its numbers -> {numbers}"],
        "built",
        html,
        details={"source": rep["source"], "numbers": numbers},
    )
