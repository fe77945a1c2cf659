"""The `fgram` command."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import NoReturn

import click

from fgram.pipeline.errors import FgramError
from fgram.version import __version__


def _fail(message: str) -> NoReturn:
    from fgram.jobs.progress import PROGRESS

    PROGRESS.end(finished=False)
    click.echo(f"fgram: error: {message}", err=True)
    sys.exit(2)


def _conf_pairs(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--conf")
        out[key.strip()] = value.strip()
    return out


class Interrupted(Exception):
    """Ctrl-C in a command (click would print a blank line for a KeyboardInterrupt)."""


class _Commands(click.Group):
    """Every command's endings in one place: an `FgramError` (bad input, options or
    output) is one line and exit status 2; Ctrl-C is `Interrupted` (see `main`)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise Interrupted(getattr(exc, "fgram_kept", None)) from None
        except FgramError as exc:
            _fail(str(exc))


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="fgram")
@click.option(
    "--log-level",
    type=click.Choice(["off", "error", "warn", "info", "debug"]),
    default=None,
    help="Spark's log messages at this level and above (default: error; "
    "$FGRAM_LOG_LEVEL); fgram's own stage lines show at every level but off. debug also "
    "shows fgram's debug records and keeps the JVM's start-up lines.",
)
@click.option("-q", "--quiet", is_flag=True, help="No log messages at all (--log-level off).")
def cli(log_level, quiet) -> None:
    """fgram: exact frequent n-grams (f-grams) of tokenized corpora, on Apache Spark.

    \b
    fgram synth -o corpus --tokens 10000000           # a small corpus to try
    fgram build fgrams corpus --dtype uint16 --doc-sep 0
    fgram show fgrams
    """
    from fgram.jobs.progress import PROGRESS
    from fgram.spark.session import LOG_LEVEL
    from fgram.spark.session import log_level as effective_level

    if quiet or log_level:
        os.environ[LOG_LEVEL] = "off" if quiet else log_level
    level = effective_level()
    if level == "off":
        PROGRESS.disable()
    else:  # stage lines (INFO) always; fgram's debug records with debug
        PROGRESS.enable(level=logging.DEBUG if level == "debug" else logging.INFO)


def _storage_option(fn):
    return click.option(
        "--storage-option",
        "storage",
        multiple=True,
        metavar="KEY=VALUE",
        help="Object-store setting (repeatable): a keyword of the scheme's pyarrow filesystem, "
        "e.g. endpoint_override=http://127.0.0.1:8333, region=eu-west-1. Credentials "
        "otherwise come from the environment (AWS_ACCESS_KEY_ID, ...) and config files.",
    )(fn)


def _storage(values) -> dict[str, str]:
    from fgram.pipeline.storage import parse_options

    return parse_options(values)


def _where(loc_or_path) -> str:
    """How an output is named to the user: its URI, or its absolute path."""
    from fgram.pipeline.storage import is_remote

    text = str(getattr(loc_or_path, "uri", loc_or_path))
    return text if is_remote(text) else os.path.abspath(text)


_SPARK_OPTIONS = [
    click.option("--master", default=None, help="Spark master URL (default: local[*])."),
    click.option(
        "--conf",
        "conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="Extra Spark configuration (repeatable).",
    ),
]


def _shard_options(fn):
    for opt in reversed(
        [
            click.option(
                "--column",
                default="tokens",
                show_default=True,
                help="Parquet column holding each document's token ids.",
            ),
            click.option(
                "--dtype",
                default="uint16",
                show_default=True,
                type=click.Choice(["uint16", "uint32", "int32"]),
                help="Token dtype of .bin and header-less .npy files.",
            ),
            click.option(
                "--doc-sep", default=None, type=int, help="Document separator id in flat files."
            ),
            click.option(
                "--strict",
                is_flag=True,
                help="Fail, instead of warning, when a flat file's sample looks wrong: "
                "text, the wrong --dtype, a missing or absent --doc-sep.",
            ),
            click.option(
                "--engine",
                default="spark",
                show_default=True,
                type=click.Choice(["spark", "local"]),
                help="spark, or the same tasks in local processes without a JVM.",
            ),
            click.option(
                "--unit-tokens",
                default=16 * 2**20,
                show_default=True,
                type=int,
                help="Most tokens per task (flat files are split into the fewest equal "
                "ranges of at most this size).",
            ),
            *_SPARK_OPTIONS,
            _storage_option,
        ]
    ):
        fn = opt(fn)
    return fn


def _build_options(fn):
    for opt in reversed(
        [
            click.option(
                "--max-len",
                "-K",
                default=5,
                show_default=True,
                type=int,
                help="Longest n-gram length K (2..8).",
            ),
            click.option(
                "--min-count",
                default=5,
                show_default=True,
                type=int,
                help="Smallest count an f-gram may have.",
            ),
            click.option(
                "--size",
                "-S",
                default=None,
                type=int,
                help="Keep the top S n-grams (all lengths ranked together). "
                "Default: all >= min-count.",
            ),
            click.option(
                "--broadcast-budget",
                default="512M",
                show_default=True,
                help="Largest frequent set shipped whole to every task; above it, a "
                "distributed join.",
            ),
        ]
    ):
        fn = opt(fn)
    return _shard_options(fn)


def _build_config(inputs, output, opts: dict, **extra):
    from fgram.pipeline.config import BuildConfig
    from fgram.pipeline.storage import parse_size

    return BuildConfig(
        inputs=list(inputs),
        output=output,
        max_len=opts["max_len"],
        min_count=opts["min_count"],
        size=opts["size"],
        column=opts["column"],
        dtype=opts["dtype"],
        doc_sep=opts["doc_sep"],
        broadcast_budget=parse_size(opts["broadcast_budget"]),
        unit_tokens=opts["unit_tokens"],
        engine=opts["engine"],
        master=opts["master"],
        conf=_conf_pairs(opts["conf"]),
        storage=_storage(opts["storage"]),
        strict=opts["strict"],
        **extra,
    )


def _summary(manifest: dict, where: str) -> str:
    return (
        f"{manifest['fgrams']} f-grams from {manifest['totals']['tokens']} tokens "
        f"({manifest['totals']['documents']} documents), cutoff count "
        f"{manifest['cutoff_count']}, in {manifest['seconds']:.1f}s -> {where}"
    )


@cli.command("build", short_help="The f-gram table of tokenized shards.")
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
    "--work-dir",
    default=None,
    help="Folder or URI for the run's intermediates (default: beside a local TABLE; "
    "for an object-store TABLE, this machine's cache in local mode, else beside "
    "TABLE on the store).",
)
@_build_options
def build_command(table, inputs, old_output, overwrite, resume, work_dir, **opts):
    """Build the f-gram table TABLE of tokenized shards INPUTS (files, folders, globs, URIs).

    Parquet (a list-of-integers column, one document per row), raw .bin /
    header-less .npy token files (--dtype, --doc-sep) and true .npy files.
    Writes TABLE/fgrams/ (Parquet: fgram_id, length, tokens, count),
    TABLE/manifest.json and TABLE/_SUCCESS, published atomically.

    \b
    fgram build fgrams shards/ --dtype uint16 --doc-sep 0 -S 10000000
    fgram build s3://bucket/fgrams s3://corpus/shards --doc-sep 0 --master spark://host:7077
    """
    from fgram.jobs.build import run_build

    if old_output is not None:  # the old spelling: fgram build INPUTS... -o TABLE
        inputs = (table, *inputs)
        table = _renamed("-o", "fgram build TABLE INPUTS...", old_output, table)
    if not inputs:
        _fail("give the table, then the inputs: fgram build TABLE INPUTS...")
    _table_first(table)
    manifest = run_build(
        _build_config(inputs, table, opts, overwrite=overwrite, resume=resume, work_dir=work_dir)
    )
    click.echo(_summary(manifest, _where(table)))


def _table_first(table: str) -> None:
    """TABLE, the first argument, names no input: a shard or a corpus folder there means
    the arguments are in the old order (or the table was left out)."""
    from fgram.pipeline.publish import foreign_output
    from fgram.pipeline.storage import is_remote

    if not is_remote(table) and foreign_output(table):
        _fail(
            f"{os.path.abspath(table)}: exists and is not an fgram table; the table comes "
            f"first: fgram build TABLE INPUTS..."
        )


@cli.command("refresh", short_help="A new version of a versioned table, incrementally.")
@click.argument("table", metavar="TABLE")
@click.argument("inputs", nargs=-1, required=True)
@click.option(
    "--keep",
    default=3,
    show_default=True,
    type=int,
    help="Versions to keep (the current one always stays).",
)
@_build_options
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

    res = run_refresh(_build_config(inputs, table, opts), keep=keep)
    pruned = f"; deleted {len(res['pruned'])} old version(s)" if res["pruned"] else ""
    if not res["built"]:
        click.echo(f"up to date: {_where(table).rstrip('/')}/current -> {res['version']}{pruned}")
        return
    click.echo(
        _summary(res["manifest"], f"{_where(table).rstrip('/')}/versions/{res['version']}")
        + f"; current -> {res['version']} (was {res['previous']}){pruned}"
    )


@cli.command("diff", short_help="F-grams added and removed between two tables.")
@click.argument("old")
@click.argument("new")
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=int,
    help="How many of the most frequent added and removed f-grams to list.",
)
@click.option("--show", "old_show", default=None, type=int, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
@_storage_option
def diff_command(old, new, top, old_show, as_json, storage):
    """What changed from table OLD to table NEW: f-grams added and removed, the cutoff.

    OLD and NEW are build outputs, versions (TABLE/versions/<id>) or refresh folders
    (their current version).

    \b
    fgram diff fgrams-june fgrams --top 20
    fgram diff TABLE/versions/<id> TABLE --json
    """
    from fgram.pipeline.diff import diff_tables

    top = _renamed("--show", "--top", old_show, top)
    rep = diff_tables(old, new, show=top, storage=_storage(storage))
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return
    click.echo(f"{rep['old']} -> {rep['new']}")
    click.echo(
        f"f-grams {rep['fgrams']['old']} -> {rep['fgrams']['new']}: "
        f"+{rep['added']} added, -{rep['removed']} removed, {rep['kept']} kept "
        f"({rep['kept_count_changed']} with another count)"
    )
    click.echo(
        f"cutoff count {rep['cutoff_count']['old']} -> {rep['cutoff_count']['new']}; "
        f"tokens {rep['tokens']['old']} -> {rep['tokens']['new']}"
    )
    for name in ("added", "removed"):
        for row in rep[f"top_{name}"]:
            click.echo(f"  {'+' if name == 'added' else '-'} {row['count']:>10}  {row['tokens']}")


@cli.command("synth", short_help="Generate a corpus for tries, tests and benchmarks.")
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
    type=click.Choice(["parquet", "bin"]),
    help="parquet: doc_id, tokens list<int32>; bin: uint16/uint32 with separator 0.",
)
@click.option("--files", default=None, type=int, help="Number of shard files (default: by size).")
@click.option("--overwrite", is_flag=True, help="Replace an existing folder (its files go).")
def synth_command(output, tokens, vocab, seed, book_seed, fmt, files, overwrite):
    """Generate a corpus with heavy-tailed, realistic n-gram statistics.

    \b
    fgram synth -o corpus --tokens 10000000 --format bin    # then: --dtype uint16 --doc-sep 0
    """
    from fgram.pipeline.storage import is_remote
    from fgram.pipeline.synth import generate

    if is_remote(output):
        _fail(f"{output}: synth writes a local folder (upload it afterwards)")
    if tokens < 1:
        _fail(f"--tokens must be >= 1, got {tokens}")
    if not 2 <= vocab <= 2**31 - 1:
        _fail(f"--vocab must be in 2..2147483647, got {vocab}")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        if not overwrite:  # another corpus's shards would stay beside the new ones
            _fail(f"{os.path.abspath(output)}: exists; pass --overwrite to replace it")
        import shutil

        shutil.rmtree(output) if os.path.isdir(output) else os.remove(output)
    meta = generate(
        output, tokens, vocab=vocab, seed=seed, fmt=fmt, files=files, book_seed=book_seed
    )
    hint = f" (use --dtype {meta['dtype']} --doc-sep 0)" if fmt == "bin" else ""
    click.echo(f"wrote {meta['tokens']} tokens in {meta['documents']} documents to {output}{hint}")


@cli.command("clean", short_help="List or remove the cache and killed runs' leftovers.")
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
    from fgram.pipeline import clean

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


def _renamed(old: str, new: str, old_value, value):
    """An option's old spelling, still taken for one release, with a one-line note."""
    if old_value is None:
        return value
    click.echo(
        f"fgram: warning: {old} is deprecated and goes in the next release; use {new}", err=True
    )
    return old_value


def _tokenizer(path: str):
    """A Hugging Face tokenizer from ``path`` (the `text` extra), or a one-line error."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        _fail("--tokenizer needs the 'tokenizers' package: pip install 'fgram[text]'")
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # noqa: BLE001 - one line
        _fail(f"{path}: not a tokenizer.json ({str(exc).splitlines()[0][:200]})")


@cli.command("show", short_help="A table's summary and top f-grams.")
@click.argument("table", metavar="TABLE")
@click.option("--top", default=20, show_default=True, type=int, help="How many f-grams to list.")
@click.option(
    "--tokenizer",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A Hugging Face tokenizer.json, to print f-grams as text (extra: tokenizers).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@_storage_option
def show_command(table, top, tokenizer, as_json, storage):
    """Summarise table TABLE: the manifest and the top f-grams.

    TABLE is a build output or a refresh folder (its current version), a path or a URI.

    \b
    fgram show fgrams --top 20 --tokenizer tokenizer.json
    """
    from fgram.pipeline.versions import open_table, table_dataset

    loc, manifest = open_table(table, _storage(storage))
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    decode = _tokenizer(tokenizer).decode if tokenizer else None
    cfg = manifest["config"]
    click.echo(f"fgram table {_where(loc)} (fgram {manifest['fgram_version']})")
    click.echo(
        f"  inputs: {len(manifest['inputs'])} files, {manifest['totals']['tokens']} tokens, "
        f"{manifest['totals']['documents']} documents"
    )
    click.echo(f"  config: K={cfg['max_len']} min_count={cfg['min_count']} size={cfg['size']}")
    click.echo(
        f"  f-grams: {manifest['fgrams']}, cutoff count {manifest['cutoff_count']}, "
        f"by length {manifest['by_length']}"
    )
    click.echo(
        f"  {'pass':>4} {'threshold':>9} {'candidates':>12} {'distinct':>10} {'kept':>10} "
        f"{'lookup':>9} {'seconds':>8}"
    )
    for p in manifest["passes"]:  # a refresh's passes count no distinct or lookup
        click.echo(
            f"  {p['length']:>4} {p['threshold']:>9} {p['candidates']:>12} "
            f"{p.get('distinct', '-'):>10} {p['kept']:>10} {p.get('lookup', '-'):>9} "
            f"{p['seconds']:>8.2f}"
        )
    table = table_dataset(loc, manifest).head(top) if top > 0 else None
    if table is not None and table.num_rows:
        click.echo(f"  top {table.num_rows}:")
        for row in table.to_pylist():
            text = f"  {decode(row['tokens'])!r}" if decode else ""
            click.echo(f"  {row['fgram_id']:>8} {row['count']:>10} {row['tokens']}{text}")


def _refuse_existing(table: str, part: str, storage, overwrite: bool) -> str:
    """Like every writer: an existing TABLE/<part> is replaced only with --overwrite.
    Returns where TABLE/<part> is, as the user is shown it (a refresh folder's: in its
    current version)."""
    from fgram.pipeline.versions import resolve_table

    where = resolve_table(table, _storage(storage)).child(part)
    there = where.exists()
    if there and not overwrite:
        _fail(f"{_where(where)}: exists; pass --overwrite to replace it")
    return _where(where)


@cli.command("index", short_help="The f-gram index that lookups use.")
@click.argument("table", metavar="TABLE")
@click.option("--overwrite", is_flag=True, help="Replace an existing index.")
@_storage_option
def index_command(table, overwrite, storage):
    """Write TABLE/index/: the memory-mappable f-gram index that lookups use.

    \b
    fgram index fgrams
    """
    from fgram.pipeline.index import write_index

    where = _refuse_existing(table, "index", storage, overwrite)
    meta = write_index(table, _storage(storage))
    click.echo(f"indexed {meta['fgrams']} f-grams -> {where}")


def _annotate(table, shards, output, overwrite, opts: dict) -> dict:
    """Run annotate (or, with no ``output``, coverage) with the shard options ``opts``."""
    from fgram.jobs.annotate import AnnotateConfig, run_annotate

    opts = {**opts, "conf": _conf_pairs(opts["conf"]), "storage": _storage(opts["storage"])}
    return run_annotate(
        AnnotateConfig(table=table, inputs=list(shards), output=output, overwrite=overwrite, **opts)
    )


def _print_coverage(cov: dict) -> None:
    n = cov["positions"]
    click.echo(f"  positions: {n}")
    click.echo(f"  {'length':>7} {'positions':>12} {'share':>8}")
    click.echo(f"  {'none':>7} {cov['unmatched']:>12} {cov['share_unmatched']:>8.2%}")
    for length, count in cov["matched_by_length"].items():
        click.echo(f"  {length:>7} {count:>12} {cov['share_by_length'][length]:>8.2%}")
    click.echo(f"  mean match length (1 where unmatched): {cov['mean_match_length']:.3f}")


@cli.command("annotate", short_help="Per-token f-gram tags of training shards.")
@click.argument("table", metavar="TABLE")
@click.argument("shards", nargs=-1, required=True)
@click.option("-o", "--output", required=True, help="Tags folder (published atomically).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
@_shard_options
def annotate_command(table, shards, output, overwrite, **opts):
    """Tag every token of SHARDS with its longest f-gram of TABLE (needs TABLE/index).

    Parquet shards give Parquet tags (fgram_ids, match_len, and the input's other
    columns, same row order); flat shards give <name>.fgid.npy and <name>.mlen.npy
    aligned with the tokens.

    \b
    fgram annotate fgrams shards/ --dtype uint16 --doc-sep 0 -o tags
    """
    m = _annotate(table, shards, output, overwrite, opts)
    click.echo(f"tagged {m['coverage']['positions']} tokens -> {_where(output)}")
    _print_coverage(m["coverage"])


@cli.command("coverage", short_help="How much of held-out shards a table matches.")
@click.argument("table", metavar="TABLE")
@click.argument("shards", nargs=-1, required=True)
@_shard_options
def coverage_command(table, shards, **opts):
    """Share of positions of (held-out) SHARDS matched at each length by TABLE's f-grams.

    \b
    fgram coverage fgrams heldout/ --dtype uint16 --doc-sep 0
    """
    m = _annotate(table, shards, None, False, opts)
    _print_coverage(m["coverage"])


@cli.command("embed", short_help="A model's output for every f-gram (the store).")
@click.argument("table", metavar="TABLE")
@click.option(
    "--model",
    required=True,
    help="module:factory; factory() returns model(tokens int32 [B, K], lengths [B]) "
    "-> [B, d] (e.g. fgram.pipeline.models:hashed).",
)
@click.option("--batch", default=4096, show_default=True, help="F-grams per model call.")
@click.option(
    "--float",
    "float_type",
    default="float16",
    show_default=True,
    type=click.Choice(["float16", "bfloat16", "float32"]),
    help="Stored row type.",
)
@click.option(
    "--dtype",
    "old_dtype",
    default=None,
    hidden=True,
    type=click.Choice(["float16", "bfloat16", "float32"]),
)
@click.option(
    "--chunk-rows",
    default=1 << 16,
    show_default=True,
    help="Rows per chunk: a killed run resumes from its last finished chunk.",
)
@click.option(
    "--device",
    default=None,
    help="Passed to the model factory as device=... (e.g. cpu, cuda; torch models).",
)
@click.option(
    "--engine",
    default="spark",
    show_default=True,
    type=click.Choice(["spark", "local"]),
    help="spark, or every chunk in this process without a JVM.",
)
@click.option("--local", is_flag=True, hidden=True)
@click.option("--overwrite", is_flag=True, help="Replace existing embeddings.")
@_SPARK_OPTIONS[0]
@_SPARK_OPTIONS[1]
@_storage_option
def embed_command(
    table,
    model,
    batch,
    float_type,
    old_dtype,
    chunk_rows,
    device,
    engine,
    local,
    overwrite,
    master,
    conf,
    storage,
):
    """Write TABLE/embeddings/: the model's output for every f-gram, row i = fgram_id i.

    TABLE is a build output or a refresh folder (its current version), a path or a URI.
    Chunks run as Spark tasks (or in this process with --engine local); a killed run
    resumes from its finished chunks. Lookups afterwards need TABLE/index. --model has
    no default: the rows are meaningful only for the f-gram model a model is trained
    with (fgram.pipeline.models:hashed is a deterministic filler for trying the store).

    \b
    fgram embed fgrams --model fgram.pipeline.models:hashed --engine local
    fgram embed fgrams --model mypkg.fgram_model:load --device cuda --float bfloat16
    """
    from fgram.jobs.embed import EmbedConfig, run_embed

    where = _refuse_existing(table, "embeddings", storage, overwrite)
    float_type = _renamed("--dtype", "--float", old_dtype, float_type)
    if local:
        engine = _renamed("--local", "--engine local", "local", engine)
    meta = run_embed(
        EmbedConfig(
            table=table,
            model=model,
            batch=batch,
            dtype=float_type,
            chunk_rows=chunk_rows,
            device=device,
            local=engine == "local",
            master=master,
            conf=_conf_pairs(conf),
            storage=_storage(storage),
        )
    )
    click.echo(
        f"embedded {meta['rows']} f-grams (d={meta['dim']}, {meta['dtype']}) in "
        f"{meta['seconds']:.1f}s -> {where}"
    )


@cli.command("lookup", short_help="The longest f-gram at each position of a context.")
@click.argument("table", metavar="TABLE")
@click.option(
    "--tokens", default=None, help="Token ids of one context, separated by commas or spaces."
)
@click.option("--text", default=None, help="The text of one context (needs --tokenizer).")
@click.option(
    "--tokenizer",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A Hugging Face tokenizer.json: tokenizes --text and shows the matches as "
    "text (extra: tokenizers).",
)
@click.option(
    "--mode",
    default="mmap",
    show_default=True,
    type=click.Choice(["ram", "mmap"]),
    help="mmap: arrays mapped from disk (shared, opens at once); ram: read into memory.",
)
@_storage_option
def lookup_command(table, tokens, text, tokenizer, mode, storage):
    """Print, for each position of a context, its longest f-gram in table TABLE (and the
    start of its embedding row when TABLE has embeddings).

    TABLE is a build output or a refresh folder (its current version), a path or a URI.

    \b
    fgram lookup fgrams --tokens 464,3290,286
    fgram lookup fgrams --text "the cat sat" --tokenizer tokenizer.json
    """
    from fgram.pipeline.embed import FgramStore
    from fgram.pipeline.index import FgramIndex

    if (tokens is None) == (text is None):
        _fail("give the context as --tokens IDS or as --text TEXT (with --tokenizer)")
    tok = _tokenizer(tokenizer) if tokenizer else None
    if text is not None:
        if tok is None:
            _fail("--text needs --tokenizer tokenizer.json")
        ids = tok.encode(text, add_special_tokens=False).ids
    else:
        try:
            ids = [int(t) for t in tokens.replace(",", " ").split()]
        except ValueError:
            _fail(f"--tokens {tokens!r}: expected token ids separated by commas or spaces")
    opts = _storage(storage)
    index = FgramIndex.open(table, mode=mode, storage=opts)
    try:
        store = FgramStore.open(table, mode=mode, storage=opts)
    except FgramError:
        store = None  # matches only: the table has no embeddings (`fgram embed`)
    fid, lengths = index.match(ids)
    rows = store.rows(fid) if store is not None else None
    show = (lambda g: repr(tok.decode(g))) if tok else (lambda g: " ".join(map(str, g)))
    click.echo(
        f"  {'pos':>4} {'token':>8} {'fgram_id':>9} {'len':>4}  match"
        + ("  |  row[:4]" if store is not None else "")
    )
    for i, t in enumerate(ids):
        match = show(ids[i - int(lengths[i]) + 1 : i + 1]) if fid[i] >= 0 else "-"
        line = f"  {i:>4} {t:>8} {fid[i]:>9} {lengths[i]:>4}  {match}"
        if rows is not None:
            line += "  |  " + (
                "(unmatched: use the token embedding)"
                if fid[i] < 0
                else " ".join(f"{v:.4g}" for v in rows[i, :4])
            )
        click.echo(line)
    if store is None:
        click.echo("  (no embeddings: `fgram embed` adds a row per f-gram)")


def main() -> None:
    """The `fgram` command: every way a run can end is one line on stderr (a traceback only
    with --log-level debug), exit 0, 2 (bad input or options: `FgramError`), 1 (anything
    else, e.g. a failed Spark job) or 130 (interrupted)."""
    from fgram.jobs.progress import PROGRESS

    try:
        finished = False
        try:
            cli.main(prog_name="fgram", standalone_mode=False)
            finished = True
        finally:
            PROGRESS.end(finished)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (Interrupted, click.exceptions.Abort, KeyboardInterrupt) as exc:
        kept = exc.args[0] if isinstance(exc, Interrupted) and exc.args else None
        click.echo(f"fgram: interrupted{'; ' + kept if kept else ''}", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - one line instead of a py4j traceback
        from fgram.pipeline.errors import task_failure
        from fgram.spark.session import log_level

        if log_level() == "debug":
            import traceback

            traceback.print_exc()
        line, _ = task_failure(str(exc)) if str(exc) else (type(exc).__name__, None)
        kept = getattr(exc, "fgram_kept", None)
        click.echo(f"fgram: error: {line}{'; ' + kept if kept else ''}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
