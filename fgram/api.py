"""fgram from Python: each job as a function with the command's arguments and options
(keywords named like the options: ``max_len``, ``min_count``, ``size``, ``dtype``,
``doc_sep``, ``engine``, ``master``, ``storage``, ...), returning what the command
prints as a dict. ``spark`` runs a job on a live SparkSession instead of a new one.

    import fgram
    fgram.build("fgrams", ["shards/"], dtype="uint16", doc_sep=0, size=10_000_000)
    fgram.index("fgrams")
    fgram.annotate("fgrams", ["shards/"], "tags", dtype="uint16", doc_sep=0)
    for tokens, fgram_ids, match_len in fgram.training_sequences("tags", seq_len=2048):
        ...
    store = fgram.FgramStore.open("fgrams")      # after fgram.embed("fgrams", model=...)

Errors are `FgramError` subclasses (`fgram.pipeline.errors`), each one line naming the
file or option at fault.
"""

from __future__ import annotations

from collections.abc import Iterable

# the readers, re-exported (the names `fgram/__init__.py` lists)
from fgram.pipeline.tables.embed import FgramStore as FgramStore
from fgram.pipeline.tables.index import FgramIndex as FgramIndex
from fgram.pipeline.tables.index import write_index
from fgram.pipeline.tables.tags import FgramTags as FgramTags
from fgram.pipeline.tables.tags import training_sequences as training_sequences
from fgram.pipeline.tables.versions import open_table as open_table
from fgram.pipeline.tables.versions import table_dataset as table_dataset


def _paths(inputs: str | Iterable[str]) -> list[str]:
    return (
        [str(inputs)]
        if isinstance(inputs, str) or not isinstance(inputs, Iterable)
        else [str(p) for p in inputs]
    )


def build(table, inputs, spark=None, **options) -> dict:
    """`fgram build TABLE INPUTS...`: the f-gram table; returns its manifest. Options are
    `BuildConfig`'s fields."""
    from fgram.jobs.table import run_build
    from fgram.pipeline.config.commands import BuildConfig

    return run_build(BuildConfig(inputs=_paths(inputs), output=str(table), **options), spark)


def refresh(table, inputs, keep: int = 3, spark=None, rebuild: bool = False, **options) -> dict:
    """`fgram refresh TABLE INPUTS...`: a new version for the whole new input list;
    returns {"version", "previous", "built", "pruned", "manifest" (if built), ...}.
    Options not given are the current version's; others that shape the table are
    refused unless ``rebuild``."""
    from fgram.jobs.refresh import run_refresh
    from fgram.pipeline.config.commands import BuildConfig

    cfg = BuildConfig(inputs=_paths(inputs), output=str(table), **options)
    return run_refresh(cfg, keep, spark, given=set(options), rebuild=rebuild)


def index(table, storage: dict | None = None, overwrite: bool = False) -> dict:
    """`fgram index TABLE`: writes TABLE/index/ (an existing one only with ``overwrite``);
    returns its index.json."""
    from fgram.pipeline.tables.versions import table_part

    table_part(str(table), "index", overwrite, storage)
    return write_index(str(table), storage)


def annotate(table, inputs, output, spark=None, **options) -> dict:
    """`fgram annotate TABLE INPUTS... -o OUTPUT`: per-token tags; returns their manifest
    (its "coverage" as `coverage` gives it). Options are `AnnotateConfig`'s fields."""
    from fgram.jobs.annotate import run_annotate
    from fgram.pipeline.config.commands import AnnotateConfig

    return run_annotate(
        AnnotateConfig(table=str(table), inputs=_paths(inputs), output=str(output), **options),
        spark,
    )


def coverage(table, inputs, spark=None, **options) -> dict:
    """`fgram coverage TABLE INPUTS...`: positions matched at each length, nothing
    written (``sizes="10K,100K"`` or a list: the same for the table's first S' rows).
    Options are `AnnotateConfig`'s fields."""
    from fgram.jobs.annotate import run_annotate
    from fgram.pipeline.config.commands import AnnotateConfig

    return run_annotate(
        AnnotateConfig(table=str(table), inputs=_paths(inputs), output=None, **options), spark
    )["coverage"]


def report(table, output: str = "report.html", heldout=(), **options) -> dict:
    """`fgram report TABLE -o OUTPUT [--heldout SHARDS]`: writes the page and its JSON;
    returns the report's numbers, with ``written`` (their URIs). Options are
    `ReportConfig`'s fields; the held-out shards' reading options (and the coverage's
    engine) go in ``coverage={...}``, as `AnnotateConfig`'s fields."""
    from fgram.jobs.report import run_report
    from fgram.pipeline.config.commands import ReportConfig

    held = _paths(heldout) if heldout else []
    return run_report(ReportConfig(table=str(table), output=str(output), heldout=held, **options))


def embed(table, model: str, spark=None, **options) -> dict:
    """`fgram embed TABLE --model module:factory`: the model's output for every f-gram;
    returns embeddings.json. Options are `EmbedConfig`'s fields (``engine``, ``float``:
    the stored row type, ``overwrite``, ...)."""
    from fgram.jobs.embed import run_embed
    from fgram.pipeline.config.commands import EmbedConfig

    return run_embed(EmbedConfig(table=str(table), model=model, **options), spark)


def tokenize(inputs, output, tokenizer, spark=None, **options) -> dict:
    """`fgram tokenize INPUTS... -o OUTPUT --tokenizer TOK`: token shards of text; returns
    their manifest. Options are `TokenizeConfig`'s fields."""
    from fgram.jobs.tokenize import run_tokenize
    from fgram.pipeline.config.commands import TokenizeConfig

    cfg = TokenizeConfig(
        inputs=_paths(inputs), output=str(output), tokenizer=str(tokenizer), **options
    )
    return run_tokenize(cfg, spark)


def show(table, top: int = 10, storage: dict | None = None) -> dict:
    """`fgram show TABLE`: the table's manifest, with its ``top`` f-grams (``top_fgrams``:
    fgram_id, length, tokens, count)."""
    from fgram.pipeline.tables.versions import open_table, table_dataset

    loc, manifest = open_table(str(table), storage)
    rows = table_dataset(loc, manifest).head(top).to_pylist() if top > 0 else []
    return {**manifest, "top_fgrams": rows}


def verify(table, deep: bool = False, storage: dict | None = None) -> dict:
    """`fgram verify TABLE`: every file of the table, its index and its embeddings checked
    against the size (``deep``: and sha256) recorded when written; ``problems`` lists
    what is not (`fgram.pipeline.tables.verify`)."""
    from fgram.pipeline.tables.verify import verify as check

    return check(str(table), deep=deep, storage=storage)


def diff(old, new, top: int = 10, storage: dict | None = None) -> dict:
    """`fgram diff OLD NEW`: f-grams added and removed between two tables, the cutoff, and
    the ``top`` most frequent of each."""
    from fgram.pipeline.tables.diff import diff_tables

    return diff_tables(str(old), str(new), show=top, storage=storage)
