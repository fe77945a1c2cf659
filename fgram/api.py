"""fgram from Python: each command as a function of the same name with the command's
arguments and options (keywords named like the options: ``max_len``, ``min_count``,
``size``, ``dtype``, ``doc_sep``, ``engine``, ``master``, ``storage``, ...) and its
defaults, returning what the command prints as a dict (f-grams as text where the
table's tokenizer is known). ``spark`` runs a job on a live SparkSession instead of a
new one; ``progress`` (True, or a callable given each line) shows each finished stage
as the command does (the lines are records of the ``fgram`` logger at INFO either way).

    import fgram
    fgram.tokenize(["data/"], "shards", "tokenizer.json", format="bin")
    fgram.build("fgrams", ["shards/"], size="10M", progress=True)  # reading options: the manifest
    fgram.index("fgrams")
    fgram.annotate("fgrams", ["shards/"], "tags")
    for tokens, fgram_ids, match_len in fgram.training_sequences("tags", seq_len=2048):
        ...
    fgram.embed("fgrams", model="fgram.pipeline.models:hashed")
    fgram.lookup("fgrams", text="in the beginning")["matches"]
    store = fgram.FgramStore.open("fgrams")

Errors are `FgramError` subclasses (`fgram.pipeline.errors`), each one line naming the
file or option at fault.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from fgram.pipeline.config.options import KEEP_VERSIONS, REPORT_PAGE

if TYPE_CHECKING:  # the readers, re-exported on first use (`__getattr__`)
    from fgram.pipeline.tables.embed import FgramStore as FgramStore
    from fgram.pipeline.tables.index import FgramIndex as FgramIndex
    from fgram.pipeline.tables.tags import FgramTags as FgramTags
    from fgram.pipeline.tables.tags import training_sequences as training_sequences
    from fgram.pipeline.tables.versions import open_table as open_table
    from fgram.pipeline.tables.versions import table_dataset as table_dataset

# the readers `fgram/__init__.py` lists, by module: imported when first asked for, so
# that a command that needs none (show, --help) starts without the compiled kernels
READERS = {
    "FgramStore": "fgram.pipeline.tables.embed",
    "FgramIndex": "fgram.pipeline.tables.index",
    "FgramTags": "fgram.pipeline.tables.tags",
    "training_sequences": "fgram.pipeline.tables.tags",
    "open_table": "fgram.pipeline.tables.versions",
    "table_dataset": "fgram.pipeline.tables.versions",
}


def __getattr__(name: str) -> Any:
    if name in READERS:
        import importlib

        return getattr(importlib.import_module(READERS[name]), name)
    raise AttributeError(f"module 'fgram.api' has no attribute {name!r}")


Progress = Callable[[str], Any] | bool | None


@contextlib.contextmanager
def stage_lines(progress: Progress) -> Iterator[None]:
    """A job's progress for its caller: each finished stage's line (``[pass 3/5: count]
    3 units, 1.2M tokens in 0.2 s, ...``, a record of the ``fgram`` logger at INFO, which
    the application's logging shows too) given to ``progress`` (a callable), or printed
    on stderr as the command prints it (``True``); None: logging alone."""
    if not progress:
        yield
        return
    from fgram.logs import LOG

    handler: logging.Handler
    if callable(progress):
        handler = _Calls(progress)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("fgram: %(message)s"))
    handler.setLevel(logging.INFO)
    level = LOG.level
    LOG.addHandler(handler)
    if LOG.getEffectiveLevel() > logging.INFO:
        LOG.setLevel(logging.INFO)
    try:
        yield
    finally:
        LOG.removeHandler(handler)
        LOG.setLevel(level)


class _Calls(logging.Handler):
    def __init__(self, fn: Callable[[str], Any]) -> None:
        super().__init__()
        self.fn = fn

    def emit(self, record: logging.LogRecord) -> None:
        self.fn(record.getMessage())


def _paths(inputs: str | Iterable[str]) -> list[str]:
    return (
        [str(inputs)]
        if isinstance(inputs, str) or not isinstance(inputs, Iterable)
        else [str(p) for p in inputs]
    )


def build(table, inputs, spark=None, progress: Progress = None, **options) -> dict:
    """`fgram build TABLE INPUTS...`: the f-gram table; returns its manifest. Options are
    `BuildConfig`'s fields."""
    from fgram.jobs.table import run_build
    from fgram.pipeline.config.commands import BuildConfig

    with stage_lines(progress):
        return run_build(BuildConfig(inputs=_paths(inputs), output=table, **options), spark)


def refresh(
    table,
    inputs,
    keep: int = KEEP_VERSIONS,
    spark=None,
    rebuild: bool = False,
    model: str | None = None,
    progress: Progress = None,
    **options,
) -> dict:
    """`fgram refresh TABLE INPUTS...`: a new version for the whole new input list;
    returns {"version", "previous", "built", "pruned", "manifest" (if built), ...}.
    Options not given are the current version's; others that shape the table are
    refused unless ``rebuild``. ``model``: what embeds the new version where the current
    one has embeddings (needed then: never the module ``embeddings.json`` names)."""
    from fgram.jobs.refresh import run_refresh
    from fgram.pipeline.config.commands import BuildConfig

    cfg = BuildConfig(inputs=_paths(inputs), output=table, **options)
    with stage_lines(progress):
        return run_refresh(cfg, keep, spark, given=set(options), rebuild=rebuild, model=model)


def index(table, **options) -> dict:
    """`fgram index TABLE`: writes TABLE/index/ (an existing one only with ``overwrite``);
    returns its index.json. Options are `IndexConfig`'s fields."""
    from fgram.pipeline.config.tools import IndexConfig
    from fgram.pipeline.tables.versions import table_part

    cfg = IndexConfig(table=table, **options).validate()
    table_part(cfg.table, "index", cfg.overwrite, cfg.storage)
    from fgram.pipeline.tables.index import write_index

    return write_index(cfg.table, cfg.storage)


def annotate(table, inputs, output, spark=None, progress: Progress = None, **options) -> dict:
    """`fgram annotate TABLE INPUTS... -o OUTPUT`: per-token tags; returns their manifest
    (its "coverage" as `coverage` gives it). Options are `AnnotateConfig`'s fields."""
    from fgram.jobs.annotate import run_annotate
    from fgram.pipeline.config.commands import AnnotateConfig

    cfg = AnnotateConfig(table=table, inputs=_paths(inputs), output=output, **options)
    with stage_lines(progress):
        return run_annotate(cfg, spark)


def coverage(table, inputs, spark=None, progress: Progress = None, **options) -> dict:
    """`fgram coverage TABLE INPUTS...`: positions matched at each length, nothing
    written (``sizes="10K,100K"`` or a list: the same for the table's first S' rows).
    Options are `AnnotateConfig`'s fields."""
    from fgram.jobs.annotate import run_annotate
    from fgram.pipeline.config.commands import AnnotateConfig

    cfg = AnnotateConfig(table=table, inputs=_paths(inputs), output=None, **options)
    with stage_lines(progress):
        return run_annotate(cfg, spark)["coverage"]


def report(table, output=REPORT_PAGE, heldout=(), progress: Progress = None, **options) -> dict:
    """`fgram report TABLE -o OUTPUT [--heldout SHARDS]`: writes the page and its JSON;
    returns the report's numbers, with ``written`` (their URIs). Options are
    `ReportConfig`'s fields; the held-out shards' reading options (and the coverage's
    engine) go in ``coverage={...}``, as `AnnotateConfig`'s fields."""
    from fgram.jobs.report import run_report
    from fgram.pipeline.config.commands import ReportConfig

    held = _paths(heldout) if heldout else []
    with stage_lines(progress):
        return run_report(ReportConfig(table=table, output=output, heldout=held, **options))


def embed(table, model: str, spark=None, progress: Progress = None, **options) -> dict:
    """`fgram embed TABLE --model module:factory`: the model's output for every f-gram;
    returns embeddings.json. Options are `EmbedConfig`'s fields (``engine``, ``float``:
    the stored row type, ``overwrite``, ...)."""
    from fgram.jobs.embed import run_embed
    from fgram.pipeline.config.commands import EmbedConfig

    with stage_lines(progress):
        return run_embed(EmbedConfig(table=table, model=model, **options), spark)


def tokenize(inputs, output, tokenizer, spark=None, progress: Progress = None, **options) -> dict:
    """`fgram tokenize INPUTS... -o OUTPUT --tokenizer TOK`: token shards of text; returns
    their manifest. Options are `TokenizeConfig`'s fields."""
    from fgram.jobs.tokenize import run_tokenize
    from fgram.pipeline.config.commands import TokenizeConfig

    cfg = TokenizeConfig(inputs=_paths(inputs), output=output, tokenizer=str(tokenizer), **options)
    with stage_lines(progress):
        return run_tokenize(cfg, spark)


def show(table, **options) -> dict:
    """`fgram show TABLE`: the table's manifest, with its ``top`` f-grams (``top_fgrams``:
    fgram_id, length, tokens, count, and ``text`` where the table's tokenizer, or
    ``tokenizer``, is at hand: what the command prints). Options are `ShowConfig`'s."""
    from fgram.pipeline.config.tools import ShowConfig
    from fgram.pipeline.tables.versions import open_table, table_head
    from fgram.pipeline.text.tokenizer import table_tokenizer

    cfg = ShowConfig(table=table, **options).validate()
    loc, manifest = open_table(cfg.table, cfg.storage)
    rows = table_head(loc, manifest, cfg.top) if cfg.top > 0 else []
    tok = table_tokenizer(cfg.tokenizer, manifest)
    if tok is not None:
        first = _first_of_canonical(manifest) if manifest.get("canonical") else None
        for row in rows:  # a canonical id as the text of its first original token
            ids = row["tokens"] if first is None else [int(first[t]) for t in row["tokens"]]
            row["text"] = tok.decode(ids)
    return {**manifest, "top_fgrams": rows}


def _first_of_canonical(manifest: dict) -> Any:
    """The first original token id of each canonical id of a ``--canonical`` table."""
    import numpy as np

    from fgram.engram import canonical_map

    lookup, _ = canonical_map(manifest["canonical"]["tokenizer"])
    return np.unique(lookup, return_index=True)[1]  # ids 0..size-1 each: its first token


def lookup(table, **options) -> dict:
    """`fgram lookup TABLE --tokens IDS | --text TEXT`: the longest f-gram at each position
    of one context. Returns ``tokens`` (the context's ids), ``fgram_ids`` and
    ``match_len`` (-1 and 1 where nothing matches), ``matches`` (each position's f-gram
    as text where a tokenizer is known, else its ids; None where unmatched) and ``rows``
    (the embedding rows, [n, d] float32, zeros where unmatched; None without
    embeddings). Options are `LookupConfig`'s fields: ``check``, the index's and rows'
    bytes against their XXH3 on open (`FgramIndex.open`); ``canonical``, the table was
    built with --canonical (the context's ids mapped by the table's map first)."""
    from fgram.pipeline.config.tools import LookupConfig
    from fgram.pipeline.tables.lookup import look_up

    c = LookupConfig(table=table, **options).validate()
    return look_up(
        c.table, c.tokens, c.text, c.tokenizer, c.mode, c.tokenizer_backend, c.storage,
        c.check, c.canonical,
    )  # fmt: skip


def engram_audit(
    table, engram: str, sizes=None, storage: dict | None = None, progress: Progress = None
) -> dict:
    """`fgram engram-audit TABLE --engram CONFIG [--sizes ...]`: the collision audit of an
    Engram configuration (a TOML or JSON file, or a `fgram.engram.EngramConfig`) over a
    table built with --canonical (`fgram.audit`); returns its numbers (what
    ``--json`` prints). ``sizes``: the curve's table sizes ("100K,1M" or numbers;
    default: ten around the configuration's)."""
    from fgram.audit import run_audit
    from fgram.engram import EngramConfig
    from fgram.pipeline.config.audit import EngramAuditConfig

    given = engram if isinstance(engram, EngramConfig) else str(engram)
    cfg = EngramAuditConfig(table=table, engram="-", sizes=sizes, storage=storage or {})
    with stage_lines(progress):
        return run_audit(cfg.table, given, cfg.validate().sizes, cfg.storage)


def synth(output, **options) -> dict:
    """`fgram synth -o OUTPUT`: a generated corpus (``format`` parquet, bin or text: words
    as JSON Lines in zstd with the tokenizer.json that gives their ids); returns its
    counts (``tokens``, ``documents``, ``dtype``, ...). Options are `SynthConfig`'s."""
    from fgram.pipeline.config.tools import SynthConfig
    from fgram.pipeline.formats.synth import make_corpus

    c = SynthConfig(output=str(output), **options).validate()
    return make_corpus(c.output, c.tokens, c.vocab, c.seed, c.book_seed, c.format, c.files,
                       c.overwrite)  # fmt: skip


def clean(folders: Iterable[str] = (), **options) -> dict:
    """`fgram clean [FOLDER...]`: the cache (``cache``) and what killed runs left beside
    their outputs in ``folders``; ``remove`` deletes them. Returns ``entries`` (path,
    kind, bytes each), ``bytes`` and ``removed``. Never an output, or what a live run
    holds. Options are `CleanConfig`'s fields."""
    from fgram.pipeline.config.tools import CleanConfig
    from fgram.pipeline.io import clean as cl

    cfg = CleanConfig(folders=_paths(folders), **options).validate()
    entries = (cl.cache_entries() if cfg.cache else []) + cl.leftovers(cfg.folders)
    if cfg.remove:
        cl.remove(entries)
    return {
        "entries": [{"path": e.path, "kind": e.kind, "bytes": e.bytes} for e in entries],
        "bytes": sum(e.bytes for e in entries),
        "removed": bool(cfg.remove and entries),
    }


def verify(table, **options) -> dict:
    """`fgram verify TABLE`: every file of the table, its index and its embeddings checked
    against the size (``deep``: and sha256) recorded when written; ``problems`` lists
    what is not (`fgram.pipeline.tables.verify`). Options are `VerifyConfig`'s."""
    from fgram.pipeline.config.tools import VerifyConfig
    from fgram.pipeline.tables.verify import verify as check

    cfg = VerifyConfig(table=table, **options).validate()
    return check(cfg.table, deep=cfg.deep, storage=cfg.storage)


def diff(old, new, **options) -> dict:
    """`fgram diff OLD NEW`: f-grams added and removed between two tables, the cutoff, and
    the ``top`` most frequent of each. Options are `DiffConfig`'s fields."""
    from fgram.pipeline.config.tools import DiffConfig
    from fgram.pipeline.tables.diff import diff_tables

    cfg = DiffConfig(old=old, new=new, **options).validate()
    return diff_tables(cfg.old, cfg.new, show=cfg.top, storage=cfg.storage)
