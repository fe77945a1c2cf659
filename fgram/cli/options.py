"""What the commands share: the options of reading shards, building and Spark, the
one-line failure, and how an output is named to the user."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click


def fail(message: str) -> NoReturn:
    from fgram.jobs.progress import PROGRESS

    PROGRESS.end(finished=False)
    click.echo(f"fgram: error: {message}", err=True)
    sys.exit(2)


def conf_pairs(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--conf")
        out[key.strip()] = value.strip()
    return out


class Interrupted(Exception):
    """Ctrl-C in a command (click would print a blank line for a KeyboardInterrupt)."""


def storage_option(fn):
    return click.option(
        "--storage-option",
        "storage",
        multiple=True,
        metavar="KEY=VALUE",
        help="Object-store setting (repeatable): a keyword of the scheme's pyarrow filesystem, "
        "e.g. endpoint_override=http://127.0.0.1:8333, region=eu-west-1. Credentials "
        "otherwise come from the environment (AWS_ACCESS_KEY_ID, ...) and config files.",
    )(fn)


def parse_storage(values) -> dict[str, str]:
    from fgram.pipeline.io.failures import parse_options

    return parse_options(values)


def shown(loc_or_path) -> str:
    """How an output is named to the user: its URI, or its absolute path."""
    from fgram.pipeline.io.storage import is_remote

    text = str(getattr(loc_or_path, "uri", loc_or_path))
    return text if is_remote(text) else os.path.abspath(text)


SPARK_OPTIONS = [
    click.option("--master", default=None, help="Spark master URL (default: local[*])."),
    click.option(
        "--conf",
        "conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="Extra Spark configuration (repeatable).",
    ),
]


def engine_option(help: str):
    return click.option(
        "--engine",
        default="spark",
        show_default=True,
        type=click.Choice(["spark", "local"]),
        help=help,
    )


def tokenizer_option(help: str):
    """``--tokenizer``: a tokenizer.json to show f-grams as text (``help``: its default)."""
    return click.option(
        "--tokenizer",
        default=None,
        type=click.Path(exists=True, dir_okay=False),
        help=f"A Hugging Face tokenizer.json {help} (extra: tokenizers; default: the one "
        f"the table's manifest names, when it is found here).",
    )


def shards_format(help: str):
    """``--format``: the token shards a command writes, Parquet or flat."""
    return click.option(
        "--format",
        "fmt",
        default="parquet",
        show_default=True,
        type=click.Choice(["parquet", "bin"]),
        help=help,
    )


def text_options(fn):
    """How text is read: ``--text-field``, ``--doc-per-line``."""
    fn = click.option(
        "--doc-per-line", is_flag=True, help=".txt files: a document per line, not per file."
    )(fn)
    return click.option(
        "--text-field",
        default="text",
        show_default=True,
        help="The JSON field (a dotted path for nested ones) or Parquet column of the text.",
    )(fn)


def shard_options(fn):
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
            engine_option("spark, or the same tasks in local processes without a JVM."),
            click.option(
                "--unit-tokens",
                default=16 * 2**20,
                show_default=True,
                type=int,
                help="Most tokens per task (flat files are split into the fewest equal "
                "ranges of at most this size).",
            ),
            *SPARK_OPTIONS,
            storage_option,
        ]
    ):
        fn = opt(fn)
    return fn


def build_options(fn):
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
                help="Largest frequent set (and selection) shipped whole to every task; "
                "above it, a distributed join (and a decode by key range).",
            ),
            click.option(
                "--key-ranges",
                default=0,
                show_default=True,
                type=click.IntRange(min=0),
                help="At least this many key ranges (tasks) per pass of a build (refresh "
                "sizes its own); more bound each task's memory (0: by volume and cores).",
            ),
            click.option(
                "--rank-rows",
                default=4_000_000,
                show_default=True,
                type=click.IntRange(min=1),
                help="Rows per rank task; a larger (count, length) group is split by its "
                "leading tokens.",
            ),
        ]
    ):
        fn = opt(fn)
    return shard_options(fn)


def build_config(inputs, output, opts: dict, **extra):
    from fgram.pipeline.config import BuildConfig
    from fgram.pipeline.io.cache import parse_size

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
        key_ranges=opts["key_ranges"],
        rank_rows=opts["rank_rows"],
        engine=opts["engine"],
        master=opts["master"],
        conf=conf_pairs(opts["conf"]),
        storage=parse_storage(opts["storage"]),
        strict=opts["strict"],
        **extra,
    )


def summary(manifest: dict, where: str) -> str:
    return (
        f"{manifest['fgrams']} f-grams from {manifest['totals']['tokens']} tokens "
        f"({manifest['totals']['documents']} documents), cutoff count "
        f"{manifest['cutoff_count']}, in {manifest['seconds']:.1f}s -> {where}"
    )


def renamed(old: str, new: str, old_value, value):
    """An option's old spelling, still taken for one release, with a one-line note."""
    if old_value is None:
        return value
    click.echo(
        f"fgram: warning: {old} is deprecated and goes in the next release; use {new}", err=True
    )
    return old_value


def refuse_existing(table: str, part: str, storage, overwrite: bool) -> str:
    """Like every writer: an existing TABLE/<part> is replaced only with --overwrite.
    Returns where TABLE/<part> is, as the user is shown it (a refresh folder's: in its
    current version)."""
    from fgram.pipeline.tables.versions import resolve_table

    where = resolve_table(table, parse_storage(storage)).child(part)
    there = where.exists()
    if there and not overwrite:
        fail(f"{shown(where)}: exists; pass --overwrite to replace it")
    return shown(where)
