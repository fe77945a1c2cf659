"""The commands that make tables and corpora: build, refresh, tokenize, synth, clean."""

from __future__ import annotations

import os

import click
from click.core import ParameterSource

from fgram.cli.options import config_options, fail, shown, summary
from fgram.cli.results import finished, json_option, table_fields
from fgram.pipeline.config.commands import BuildConfig, TokenizeConfig
from fgram.pipeline.config.options import KEEP_VERSIONS
from fgram.pipeline.config.tools import CleanConfig, SynthConfig

DRY_RUN = (
    "Print the plan and stop: the inputs (files, bytes, tokens), the units to count, the "
    "options; for a refresh, whether it would build and which shards it would count, "
    "reuse and subtract. Reads metadata only; writes nothing."
)

# build's options that a refresh has not: it publishes versions of its own, from tokens
REFRESH_TAKES_NOT = (
    "inputs",
    "output",
    "overwrite",
    "resume",
    "work_dir",
    "work_budget",
    "tokenizer",
    "text_field",
    "doc_per_line",
    "canonical",
)


@click.command("build", short_help="The f-gram table of tokenized shards.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, metavar="INPUTS...")
@config_options(BuildConfig, exclude=("inputs", "output"))
@click.option("--dry-run", is_flag=True, help=DRY_RUN)
@json_option
def build_command(table, inputs, dry_run, **opts):
    """Build the f-gram table TABLE of tokenized shards INPUTS (files, folders, globs, URIs).

    Parquet (a list-of-integers column, one document per row), raw .bin /
    header-less .npy token files (--dtype, --doc-sep) and true .npy files; the output
    of `fgram tokenize` (its manifest gives the dtype and separator); or, with
    --tokenizer, text. Writes TABLE/fgrams/ (Parquet: fgram_id, length, tokens, count),
    TABLE/manifest.json and TABLE/_SUCCESS, published atomically.

    \b
    fgram build fgrams shards/ -S 10M        # `fgram tokenize` shards: options from their manifest
    fgram build fgrams data/*.bin --dtype uint16 --doc-sep 0 -S 10M
    fgram build fgrams data/*.jsonl.zst --tokenizer tokenizer.json -S 1M
    fgram build s3://bucket/fgrams s3://corpus/shards --doc-sep 0 --master spark://host:7077
    """
    from fgram.jobs.table import run_build

    if not inputs:
        fail("give the table, then the inputs: fgram build TABLE INPUTS...")
    _table_first(table)
    if dry_run:
        from fgram.jobs.plan import plan_build

        planned(plan_build(BuildConfig(inputs=list(inputs), output=table, **opts)), table)
        return
    manifest = run_build(BuildConfig(inputs=list(inputs), output=table, **opts))
    finished([summary(manifest, shown(table))], "built", shown(table), **table_fields(manifest))


def planned(plan: dict, table: str) -> None:
    """A dry run's lines (and result, status ``planned``)."""
    tokens = f", {plan['tokens']} tokens" if plan.get("tokens") is not None else ""
    lines = [
        f"would {plan['would'].removeprefix('would ')} -> {shown(table)}",
        f"  inputs: {plan['files']} files, {plan['bytes']} bytes{tokens}; {plan['units']} "
        f"units, {plan['passes']} passes",
        "  options: " + " ".join(f"{k}={v}" for k, v in plan["options"].items()),
    ]
    if "new" in plan and plan.get("store"):
        lines.append(
            f"  store {plan['store']}: {len(plan['new'])} new shards to count "
            f"({plan['units_to_count']} units), {len(plan['kept'])} kept, "
            f"{plan['removed']} removed"
        )
    counts = {k: plan.get(k) for k in ("files", "bytes", "tokens", "units")}
    finished(lines, "planned", shown(table), counts=counts, details=plan)


def _table_first(table: str) -> None:
    """TABLE, the first argument, names no input: a shard or a corpus folder there means
    the arguments are in the old order (or the table was left out)."""
    from fgram.pipeline.io.publish import foreign_output
    from fgram.pipeline.io.storage import is_remote

    if not is_remote(table) and foreign_output(table):
        fail(
            f"{os.path.abspath(table)}: exists and is not an fgram table; the table comes "
            f"first: fgram build TABLE INPUTS..."
        )


@click.command("refresh", short_help="A new version of a versioned table, incrementally.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUTS...")
@click.option(
    "--keep",
    default=KEEP_VERSIONS,
    show_default=True,
    type=int,
    help="Versions to keep (the current one always stays).",
)
@click.option(
    "--rebuild",
    is_flag=True,
    help="Options that shape the table (-K, --min-count, -S, reading options) other than "
    "the current version's: start the table afresh with them (older versions are kept). "
    "Without it such a run is refused; options not given are the current version's.",
)
@click.option(
    "--model",
    default=None,
    metavar="MODULE:FACTORY",
    help="The f-gram model that embeds the new version, where the current one has "
    "embeddings (the row type and chunking are the current version's). Needed then: "
    "refresh runs no code that a data file names.",
)
@config_options(BuildConfig, exclude=REFRESH_TAKES_NOT)
@click.option("--dry-run", is_flag=True, help=DRY_RUN)
@json_option
def refresh_command(table, inputs, keep, rebuild, model, dry_run, **opts):
    """New version of a versioned table for the input list INPUTS, incrementally.

    TABLE is a refresh folder (made by the first refresh); INPUTS is the whole new corpus:
    old shards, plus new ones, minus removed ones.

    Writes TABLE/versions/<id>/, the table `fgram build` would make of INPUTS (exactly),
    and switches TABLE/current to it atomically; does nothing if the inputs (size, mtime,
    content checksum) and options are those of the current version. Incremental: per-shard
    partial counts kept in TABLE/store/ are reused, so only new shards are counted (old ones
    are read again only for n-grams that became frequent); removed or changed shards are
    subtracted. Options not given are the current version's; other -K/--min-count/--size/
    reading options are refused unless --rebuild (which starts the store afresh, as does a
    shard of wider tokens joining 16-bit flat shards). A new version gets the index and
    embeddings the current one has before current points at it. Read the table through
    TABLE/current: every command that reads a table takes the refresh folder itself.

    \b
    fgram refresh fgram-versions shards/*.bin --dtype uint16 --doc-sep 0 -S 10M --keep 3
    fgram refresh fgram-versions shards/ --model mypkg.fgram_model:load   # with embeddings
    """
    from fgram.jobs.refresh import run_refresh

    ctx = click.get_current_context()
    given = [n for n in opts if ctx.get_parameter_source(n) != ParameterSource.DEFAULT]
    cfg = BuildConfig(inputs=list(inputs), output=table, **opts)
    if dry_run:
        from fgram.jobs.plan import plan_refresh

        planned(plan_refresh(cfg, given, rebuild), table)
        return
    res = run_refresh(cfg, keep=keep, given=given, rebuild=rebuild, model=model)
    tail = f"; deleted {len(res['pruned'])} old version(s)" if res["pruned"] else ""
    root = shown(table).rstrip("/")
    fields = {
        "version_id": res["version"],
        "previous_version_id": res["previous"],
        "fingerprint": res.get("fingerprint"),
        "details": {
            "pruned": res["pruned"],
            "current": f"{root}/current",
            "carried": res.get("carried", []),
        },
    }
    made = table_fields(res["manifest"])
    fields["counts"] = made["counts"]  # the current version's
    if not res["built"]:
        line = f"up to date: {root}/current -> {res['version']}{tail}"
        finished([line], "unchanged", f"{root}/versions/{res['version']}", **fields)
        return
    fields["seconds"] = made["seconds"]
    was = f"was {res['previous']}" if res["previous"] else "the first version"
    if res.get("rebuilt"):
        tail = f"; rebuilt with other options (older versions kept){tail}"
    if res.get("carried"):
        tail = f"; {' and '.join(res['carried'])} carried{tail}"
    line = summary(res["manifest"], f"{root}/versions/{res['version']}")
    finished(
        [f"{line}; current -> {res['version']} ({was}){tail}"],
        "built",
        f"{root}/versions/{res['version']}",
        **fields,
    )


@click.command("synth", short_help="Generate a corpus for tries, tests and benchmarks.")
@config_options(SynthConfig)
def synth_command(output, **opts):
    """Generate a corpus with heavy-tailed, realistic n-gram statistics.

    \b
    fgram synth -o corpus --tokens 10000000 --format bin    # then: --dtype uint16 --doc-sep 0
    fgram synth -o text --format text --vocab 5000          # then: --tokenizer text/tokenizer.json
    """
    from fgram.api import synth

    meta, fmt = synth(output, **opts), opts["format"]
    hint = {
        "bin": f" (use --dtype {meta['dtype']} --doc-sep 0)",
        "text": f" (use --tokenizer {os.path.join(output, 'tokenizer.json')})",
    }.get(fmt, "")
    click.echo(f"wrote {meta['tokens']} tokens in {meta['documents']} documents to {output}{hint}")


@click.command("clean", short_help="List or remove the cache and killed runs' leftovers.")
@click.argument("folders", nargs=-1, type=click.Path(exists=True, file_okay=False))
@config_options(CleanConfig, exclude=("folders",))
@json_option
def clean_command(folders, **opts):
    """List, or with --remove delete, what fgram leaves besides its outputs: the cache and,
    in FOLDERS (and one level below), what killed runs left beside their outputs.

    Never touches an output, or anything a live run holds.

    \b
    fgram clean                     # the cache
    fgram clean ~/runs --remove     # and leftovers beside the outputs in ~/runs
    """
    from fgram.api import clean

    res, remove = clean(folders, **opts), opts["remove"]
    entries, size = res["entries"], res["bytes"]
    lines = [f"  {e['bytes'] / 2**20:>10.1f} MB  {e['kind']}: {e['path']}" for e in entries]
    total = size / 2**20
    if not entries:
        lines.append("nothing to clean")
    elif remove:
        lines.append(f"removed {len(entries)} entries, {total:.1f} MB")
    else:
        lines.append(f"{len(entries)} entries, {total:.1f} MB: pass --remove to delete them")
    finished(
        lines,
        "built" if remove and entries else "unchanged",
        None,
        counts={"entries": len(entries), "bytes": size},
        details={"entries": entries, "removed": res["removed"]},
    )


@click.command("tokenize", short_help="Token shards of raw text, with a HF tokenizer.")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUTS...")
@config_options(TokenizeConfig, exclude=("inputs",))
@json_option
def tokenize_command(inputs, **opts):
    """Tokenize the text files INPUTS (files, folders, globs, URIs) into token shards.

    JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst, .zst: a document per line, its text in
    --text-field), Parquet with a text column, and .txt (a document per file, or per
    line). The output's manifest names the tokenizer, the dtype and the separator:
    `fgram build TABLE OUTPUT` reads the shards without reading options.

    \b
    fgram tokenize data/*.jsonl.zst -o tokens --tokenizer tokenizer.json
    fgram tokenize s3://corpus/text -o s3://corpus/tokens --tokenizer tok/ --format bin
    """
    from fgram.jobs.tokenize import run_tokenize

    m = run_tokenize(TokenizeConfig(inputs=list(inputs), **opts))
    rate = m["tokens"] / max(m["seconds"], 1e-9)
    line = (
        f"{m['tokens']} tokens in {m['documents']} documents ({len(m['shards'])} shards, "
        f"{m['dtype']}) in {m['seconds']:.1f}s, {rate:,.0f} tokens/s -> {shown(opts['output'])}"
    )
    finished(
        [line, chosen(m, opts)],
        "built",
        shown(opts["output"]),
        counts={"tokens": m["tokens"], "documents": m["documents"], "shards": len(m["shards"])},
        seconds={"total": m["seconds"]},
        details={"dtype": m["dtype"], "doc_sep": m.get("doc_sep")},
    )


def chosen(m: dict, opts: dict) -> str:
    """What a tokenize run chose and why, in one line: the shards' format, dtype and
    separator (the commands that read the output take them from its manifest)."""
    if m["output_format"] != "bin":
        return (
            "  Parquet shards: a document per row (tokens list<int32>); build, annotate "
            "and coverage read them without reading options"
        )
    tok = m["tokenizer"]
    why_dtype = (
        "--dtype"
        if opts.get("dtype")
        else f"{tok['vocab_size']} ids {'fit' if m['dtype'] == 'uint16' else 'need'} 16 bits"
    )
    sep, name = m["doc_sep"], _token_text(tok.get("path"), m["doc_sep"])
    why_sep = "--doc-sep" if opts.get("doc_sep") is not None else "the tokenizer's end-of-text"
    return (
        f"  dtype {m['dtype']} ({why_dtype}), separator {sep}{name} after each document "
        f"({why_sep}): build, annotate and coverage take both from the manifest"
    )


def _token_text(path: str | None, token: int) -> str:
    """`` '<|endoftext|>'`` for a token id of the tokenizer at ``path``; "" where it cannot
    be read."""
    try:
        from fgram.pipeline.text.tokenizer import load_spec, tokenizer

        text = tokenizer(load_spec(path)).id_to_token(token) if path else None
    except Exception:  # noqa: BLE001 - a name for the line only
        text = None
    return f" {text!r}" if text else ""
