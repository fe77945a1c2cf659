"""fgram: exact frequent n-gram (f-gram) selection for SCONE-style models, on Spark.

The public API (`fgram.api`), loaded on first use so that ``import fgram`` stays
light (Spark's worker daemon imports it before it forks):

    fgram.build, fgram.refresh, fgram.tokenize, fgram.index, fgram.annotate,
    fgram.coverage, fgram.report, fgram.embed, fgram.lookup, fgram.show, fgram.diff,
    fgram.verify, fgram.synth, fgram.clean (a function for every command),
    fgram.FgramIndex, fgram.FgramStore, fgram.FgramTags, fgram.training_sequences,
    fgram.open_table,
    fgram.table_dataset
"""

from fgram.version import __version__

__all__ = [
    "FgramIndex",
    "FgramStore",
    "FgramTags",
    "__version__",
    "annotate",
    "build",
    "clean",
    "coverage",
    "diff",
    "embed",
    "engram_audit",
    "index",
    "lookup",
    "open_table",
    "refresh",
    "report",
    "show",
    "synth",
    "table_dataset",
    "tokenize",
    "training_sequences",
    "verify",
]


def __getattr__(name: str):
    if name in __all__:
        from fgram import api

        return getattr(api, name)
    raise AttributeError(f"module 'fgram' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
