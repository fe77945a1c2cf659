"""The commands that make tables and corpora: build, refresh, tokenize, synth, clean."""

from __future__ import annotations

import os

import click

from fgram.cli.options import (
    SPARK_OPTIONS,
    build_config,
    build_options,
    conf_pairs,
    engine_option,
    fail,
    parse_storage,
    renamed,
    shards_format,
    shown,
    storage_option,
    summary,
    text_options,
)


@click.command("build", short_help="The f-gram table of tokenized shards.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, metavar="INPUTS...")
@click.option("-o", "--output", "old_output", default=None, hidden=True)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an existing TABLE (only an fgram output: a folder holding a "
    "manifest.json, or an empty one).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue an unfinished run on the same TABLE, INPUTS and options from its "
    "last completed pass and counted units (without it, leftovers are removed).",
)
@click.option(
    "--tokenizer",
    default=None,
    help="INPUTS are text (as for `fgram tokenize`): tokenize them with this tokenizer.json "
    "(or its folder) first, into a folder of the run, then count.",
)
@text_options
@click.option(
    "--work-dir",
    default=None,
    help="Folder or URI for the run's intermediates (default: beside a local TABLE; "
    "for an object-store TABLE, this machine's cache in local mode, else beside "
    "TABLE on the store).",
)
@build_options
def build_command(
    table,
    inputs,
    old_output,
    overwrite,
    resume,
    tokenizer,
    text_field,
    doc_per_line,
    work_dir,
    **opts,
):
    """Build the f-gram table TABLE of tokenized shards INPUTS (files, folders, globs, URIs).

    Parquet (a list-of-integers column, one document per row), raw .bin /
    header-less .npy token files (--dtype, --doc-sep) and true .npy files; the output
    of `fgram tokenize` (its manifest gives the dtype and separator); or, with
    --tokenizer, text. Writes TABLE/fgrams/ (Parquet: fgram_id, length, tokens, count),
    TABLE/manifest.json and TABLE/_SUCCESS, published atomically.

    \b
    fgram build fgrams shards/ --dtype uint16 --doc-sep 0 -S 10000000
    fgram build fgrams data/*.jsonl.zst --tokenizer tokenizer.json -S 1000000
    fgram build s3://bucket/fgrams s3://corpus/shards --doc-sep 0 --master spark://host:7077
    """
    from fgram.jobs.build import run_build

    if old_output is not None:  # the old spelling: fgram build INPUTS... -o TABLE
        inputs = (table, *inputs)
        table = renamed("-o", "fgram build TABLE INPUTS...", old_output, table)
    if not inputs:
        fail("give the table, then the inputs: fgram build TABLE INPUTS...")
    _table_first(table)
    cfg = build_config(inputs, table, opts, overwrite=overwrite, resume=resume, work_dir=work_dir)
    cfg.tokenizer, cfg.text_field, cfg.doc_per_line = tokenizer, text_field, doc_per_line
    manifest = run_build(cfg)
    click.echo(summary(manifest, shown(table)))


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
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=int,
    help="Versions to keep (the current one always stays).",
)
@build_options
def refresh_command(table, inputs, keep, **opts):
    """New version of a versioned table for the input list INPUTS, incrementally.

    TABLE is a refresh folder (made by the first refresh); INPUTS is the whole new corpus:
    old shards, plus new ones, minus removed ones.

    Writes TABLE/versions/<id>/, the table `fgram build` would make of INPUTS (exactly),
    and switches TABLE/current to it atomically; does nothing if the inputs (size, mtime,
    content checksum) and options are those of the current version. Incremental: per-shard
    partial counts kept in TABLE/store/ are reused, so only new shards are counted (old ones
    are read again only for n-grams that became frequent); removed or changed shards are
    subtracted. Other -K/--min-count/--size/reading options start the store afresh, as
    does a shard of wider tokens joining 16-bit flat shards. Read the table through
    TABLE/current: every command that reads a table takes the refresh folder itself.

    \b
    fgram refresh fgram-versions shards/*.bin --dtype uint16 --doc-sep 0 -S 10000000 --keep 3
    """
    from fgram.jobs.refresh import run_refresh

    res = run_refresh(build_config(inputs, table, opts), keep=keep)
    pruned = f"; deleted {len(res['pruned'])} old version(s)" if res["pruned"] else ""
    if not res["built"]:
        click.echo(f"up to date: {shown(table).rstrip('/')}/current -> {res['version']}{pruned}")
        return
    click.echo(
        summary(res["manifest"], f"{shown(table).rstrip('/')}/versions/{res['version']}")
        + f"; current -> {res['version']} (was {res['previous']}){pruned}"
    )


@click.command("synth", short_help="Generate a corpus for tries, tests and benchmarks.")
@click.option("-o", "--output", required=True, help="Output folder.")
@click.option("--tokens", default=1_000_000, show_default=True, type=int, help="Corpus size.")
@click.option("--vocab", default=50_000, show_default=True, type=int, help="Vocabulary size.")
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the text (and of the phrase book, unless --book-seed).",
)
@click.option(
    "--book-seed",
    default=None,
    type=int,
    help="Seed of the phrase book (default: --seed). The same book with another "
    "--seed: new text from the same distribution (new shards of a corpus).",
)
@click.option(
    "--format",
    "fmt",
    default="parquet",
    show_default=True,
    type=click.Choice(["parquet", "bin", "text"]),
    help="parquet: doc_id, tokens list<int32>; bin: uint16/uint32 with separator 0; text: "
    "words (JSON Lines, zstd) and the tokenizer.json that gives their ids back.",
)
@click.option("--files", default=None, type=int, help="Number of shard files (default: by size).")
@click.option("--overwrite", is_flag=True, help="Replace an existing folder (its files go).")
def synth_command(output, tokens, vocab, seed, book_seed, fmt, files, overwrite):
    """Generate a corpus with heavy-tailed, realistic n-gram statistics.

    \b
    fgram synth -o corpus --tokens 10000000 --format bin    # then: --dtype uint16 --doc-sep 0
    fgram synth -o text --format text --vocab 5000          # then: --tokenizer text/tokenizer.json
    """
    from fgram.pipeline.formats.synth import generate
    from fgram.pipeline.io.storage import is_remote

    if is_remote(output):
        fail(f"{output}: synth writes a local folder (upload it afterwards)")
    if tokens < 1:
        fail(f"--tokens must be >= 1, got {tokens}")
    if not 2 <= vocab <= (65535 if fmt == "text" else 2**31 - 1):
        fail(f"--vocab must be in 2..{65535 if fmt == 'text' else 2**31 - 1}, got {vocab}")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        if not overwrite:  # another corpus's shards would stay beside the new ones
            fail(f"{os.path.abspath(output)}: exists; pass --overwrite to replace it")
        import shutil

        shutil.rmtree(output) if os.path.isdir(output) else os.remove(output)
    meta = generate(
        output, tokens, vocab=vocab, seed=seed, fmt=fmt, files=files, book_seed=book_seed
    )
    hint = {
        "bin": f" (use --dtype {meta['dtype']} --doc-sep 0)",
        "text": f" (use --tokenizer {os.path.join(output, 'tokenizer.json')})",
    }.get(fmt, "")
    click.echo(f"wrote {meta['tokens']} tokens in {meta['documents']} documents to {output}{hint}")


@click.command("clean", short_help="List or remove the cache and killed runs' leftovers.")
@click.argument("folders", nargs=-1, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--cache/--no-cache",
    default=True,
    show_default=True,
    help="Also list fgram's cache ($FGRAM_CACHE_DIR, else ~/.cache/fgram).",
)
@click.option("--remove", is_flag=True, help="Delete what is listed (default: only list it).")
def clean_command(folders, cache, remove):
    """List, or with --remove delete, what fgram leaves besides its outputs: the cache and,
    in FOLDERS (and one level below), what killed runs left beside their outputs.

    Never touches an output, or anything a live run holds.

    \b
    fgram clean                     # the cache
    fgram clean ~/runs --remove     # and leftovers beside the outputs in ~/runs
    """
    from fgram.pipeline.io import clean

    entries = (clean.cache_entries() if cache else []) + clean.leftovers(list(folders))
    for e in entries:
        click.echo(f"  {e.bytes / 2**20:>10.1f} MB  {e.kind}: {e.path}")
    total = sum(e.bytes for e in entries) / 2**20
    if not entries:
        click.echo("nothing to clean")
    elif remove:
        clean.remove(entries)
        click.echo(f"removed {len(entries)} entries, {total:.1f} MB")
    else:
        click.echo(f"{len(entries)} entries, {total:.1f} MB: pass --remove to delete them")


@click.command("tokenize", short_help="Token shards of raw text, with a HF tokenizer.")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUTS...")
@click.option("-o", "--output", required=True, help="The token shards' folder (or URI).")
@click.option(
    "--tokenizer",
    required=True,
    help="A Hugging Face tokenizer.json, or a folder holding one (extra: tokenizers).",
)
@shards_format(
    "parquet: doc_id, tokens list<int32>, source, row; bin: raw uint16 (uint32 for "
    "vocabularies over 65536), each document followed by --doc-sep."
)
@text_options
@click.option("--id-field", default=None, help="A field kept beside the tokens as `id`.")
@click.option(
    "--add-special-tokens",
    is_flag=True,
    help="Add the tokenizer's special tokens (its template, e.g. BOS) to each document.",
)
@click.option(
    "--skip-bad-records",
    is_flag=True,
    help="Count a malformed record (per file, in the manifest) and go on, instead of failing.",
)
@click.option(
    "--dtype",
    default=None,
    type=click.Choice(["uint16", "uint32"]),
    help="bin: the token dtype (default: uint16 when the vocabulary fits, else uint32).",
)
@click.option(
    "--doc-sep",
    default=None,
    type=int,
    help="bin: the separator id (default: the tokenizer's end-of-text token).",
)
@click.option(
    "--shard-tokens",
    default=16 * 2**20,
    show_default=True,
    type=int,
    help="About how many tokens each output shard holds.",
)
@click.option(
    "--unit-bytes",
    default="64M",
    show_default=True,
    help="Input bytes per task (uncompressed line files are split at line starts; "
    "compressed files are a task each).",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing output (an fgram one).")
@click.option("--resume", is_flag=True, help="Continue an unfinished run from its finished units.")
@click.option(
    "--threads",
    default=None,
    type=click.IntRange(min=0),
    help="The tokenizer's threads in each task (default: twice the task's share of the "
    "cores, at most all; 0: a thread per core of the machine in every task).",
)
@engine_option("spark, or the same tasks in local processes without a JVM.")
@SPARK_OPTIONS[0]
@SPARK_OPTIONS[1]
@storage_option
def tokenize_command(inputs, fmt, unit_bytes, conf, storage, **opts):
    """Tokenize the text files INPUTS (files, folders, globs, URIs) into token shards.

    JSON Lines (.jsonl, .jsonl.gz, .jsonl.zst, .zst: a document per line, its text in
    --text-field), Parquet with a text column, and .txt (a document per file, or per
    line). The output's manifest names the tokenizer, the dtype and the separator:
    `fgram build TABLE OUTPUT` reads the shards without reading options.

    \b
    fgram tokenize data/*.jsonl.zst -o tokens --tokenizer tokenizer.json
    fgram tokenize s3://corpus/text -o s3://corpus/tokens --tokenizer tok/ --format bin
    """
    from fgram.jobs.tokenize import TokenizeConfig, run_tokenize
    from fgram.pipeline.io.cache import parse_size

    m = run_tokenize(
        TokenizeConfig(
            inputs=list(inputs),
            format=fmt,
            unit_bytes=parse_size(unit_bytes),
            conf=conf_pairs(conf),
            storage=parse_storage(storage),
            **opts,
        )
    )
    rate = m["tokens"] / max(m["seconds"], 1e-9)
    click.echo(
        f"{m['tokens']} tokens in {m['documents']} documents ({len(m['shards'])} shards, "
        f"{m['dtype']}) in {m['seconds']:.1f}s, {rate:,.0f} tokens/s -> {shown(opts['output'])}"
    )
