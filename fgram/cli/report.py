"""`fgram report`: a table's page (and its numbers as JSON)."""

from __future__ import annotations

import click

from fgram.cli.options import (
    conf_pairs,
    parse_storage,
    shard_options,
    text_options,
    tokenizer_option,
)


@click.command("report", short_help="One HTML page of a table: what it holds, how, which S.")
@click.argument("table", metavar="TABLE")
@click.option(
    "-o",
    "--output",
    default="report.html",
    show_default=True,
    help="The page (a path or a URI); its numbers go beside it as <name>.json.",
)
@click.option(
    "--heldout",
    multiple=True,
    metavar="SHARDS",
    help="Held-out token shards (repeatable; files, folders, globs; read with the shard "
    "options below), or JSON Lines / .txt text tokenized with --tokenizer: the page "
    "adds the coverage-vs-S curve (needs TABLE/index: fgram index TABLE).",
)
@click.option(
    "--sizes",
    default=None,
    help="The curve's sizes S (e.g. 10K,100K,1M); default: 1, 2, 5 x 10^k up to the table's "
    "f-grams.",
)
@tokenizer_option("to show f-grams as text and tokenize held-out text")
@click.option("--top", default=10, show_default=True, type=int, help="F-grams listed per length.")
@click.option(
    "--no-diffs",
    is_flag=True,
    help="A refresh folder: leave out each version's diff from the one before (a diff "
    "holds both tables' keys in memory).",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing page and JSON.")
@text_options
@shard_options
def report_command(
    table, output, heldout, sizes, tokenizer, top, no_diffs, overwrite, storage, **opts
):
    """Write one self-contained HTML page of TABLE (plots inlined: it opens offline)
    and its numbers as JSON beside it: f-grams per length, rank-frequency per length,
    the pass funnel with its thresholds, time per pass and stage, the cutoff count and
    the top f-grams per length (as text when a tokenizer is known); with --heldout, the
    coverage-vs-S curve that picks S. TABLE may be a refresh folder (its versions and
    their diffs too) or an annotate output (its match-length histogram). Plots need
    matplotlib: pip install 'fgram[report]'.

    \b
    fgram report fgrams -o fgrams.html
    fgram report fgrams --heldout heldout/ --dtype uint16 --doc-sep 0 --sizes 100K,1M,10M
    fgram report fgrams --heldout heldout.jsonl.zst --tokenizer tokenizer.json
    """
    from fgram.cli.options import shown
    from fgram.jobs.report import ReportConfig, run_report
    from fgram.pipeline.tables.coverage import parse_sizes

    coverage = {**opts, "conf": conf_pairs(opts["conf"])}
    rep = run_report(
        ReportConfig(
            table=table,
            output=output,
            heldout=list(heldout),
            sizes=parse_sizes(sizes) if sizes is not None else None,
            tokenizer=tokenizer,
            top=top,
            diffs=not no_diffs,
            overwrite=overwrite,
            storage=parse_storage(storage),
            coverage=coverage,
        )
    )
    from fgram.pipeline.report.plots import PLOTS_MISSING, plots_available

    if not plots_available():
        click.echo(f"fgram: warning: {PLOTS_MISSING}", err=True)
    click.echo(f"report of {rep['source']} -> {shown(rep['written']['html'])}")
    click.echo(f"  its numbers -> {shown(rep['written']['json'])}")
