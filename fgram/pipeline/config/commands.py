"""Typed configuration of each command (after dolma): validated once, recorded in the
manifest; every field an option of the command (`options.option`)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from fgram.pipeline.config.options import (
    PLACED,
    REPORT_PAGE,
    TOP,
    Options,
    bytes_option,
    canonical_option,
    column_option,
    conf_option,
    doc_per_line_option,
    doc_sep_option,
    dtype_option,
    engine_option,
    master_option,
    option,
    overwrite_option,
    parse_count,
    parse_counts,
    samples_option,
    storage_option,
    strict_option,
    text_field_option,
    tokenizer_backend_option,
    unit_tokens_option,
)
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.layouts import LAYOUTS

if TYPE_CHECKING:  # the rest on use: the command line's options are made from this module
    from fgram.pipeline.formats.reading import ReadOptions
    from fgram.pipeline.io.storage import Location
    from fgram.pipeline.text.text import TextOptions

DEFAULT_DTYPE = "uint16"  # of flat shards, unless --dtype or a tokenize manifest says
TOKENS_KIND = "fgram-tokens"  # the manifest of `fgram tokenize`'s output
C = TypeVar("C", bound="ReadsShards")


class ReadsShards:
    """A job's options for reading its shards (`inputs.ReadOptions`), shared by every job
    config that has them as fields."""

    column: str
    dtype: str | None  # None: uint16, or a `fgram tokenize` output's own
    doc_sep: int | None
    samples_are_documents: bool
    storage: dict[str, str]
    strict: bool

    inputs: list[str]

    def tokenized(self: C) -> tuple[C, dict[str, Any] | None]:
        """The options read from the manifests of `fgram tokenize` outputs among the inputs
        (their dtype, separator and column), and their tokenizer; (self, None) when no
        input is one. A separator given that differs from theirs is refused."""
        from fgram.pipeline.io.storage import locate

        found: dict[str, dict[str, Any]] = {}
        for path in self.inputs:
            if any(ch in str(path) for ch in "*?["):
                continue
            where = locate(str(path), self.storage).child("manifest.json")
            if where.exists():
                m = where.read_json()
                if isinstance(m, dict) and m.get("kind") == TOKENS_KIND:
                    found[str(path)] = m
        if not found:
            new = copy.copy(self)
            new.dtype = self.dtype or DEFAULT_DTYPE
            return new, None
        first_path, first = next(iter(found.items()))
        for path, m in found.items():
            if (m["dtype"], m["doc_sep"], m["tokenizer"]["sha256"]) != (
                first["dtype"],
                first["doc_sep"],
                first["tokenizer"]["sha256"],
            ):
                raise ConfigError(
                    f"{path} and {first_path}: tokenized with other tokenizers or formats"
                )
        from fgram.pipeline.text.token_shards import WRITERS

        new = copy.copy(self)
        new.dtype = self.dtype or DEFAULT_DTYPE
        writer = WRITERS[first["output_format"]]
        for name, value in writer.read_as(first, self.dtype, self.doc_sep, first_path).items():
            setattr(new, name, value)
        return new, first["tokenizer"]

    def read_options(self) -> ReadOptions:
        from fgram.pipeline.formats.reading import ReadOptions

        return ReadOptions(
            column=self.column,
            dtype=self.dtype or DEFAULT_DTYPE,
            doc_sep=self.doc_sep,
            storage=self.storage,
            strict=self.strict,
            samples_are_documents=self.samples_are_documents,
            token_map=getattr(self, "token_map", None),
        )


@dataclass
class BuildConfig(ReadsShards, Options):
    """`fgram build` and `fgram refresh`."""

    inputs: list[str]
    output: Location = field(metadata=PLACED)
    max_len: int = option(5, "Longest n-gram length K (2..8).", short="-K")
    min_count: int = option(5, "Smallest count an f-gram may have.", minimum=1)
    size: int | None = option(
        None,
        "Keep the top S n-grams (all lengths ranked together; 10M or 10000000). "
        "Default: all >= min-count.",
        short="-S",
        parse=lambda v: parse_count(v, "--size"),
        minimum=1,
        metavar="N",
    )
    column: str = column_option()
    dtype: str | None = dtype_option()
    doc_sep: int | None = doc_sep_option()
    samples_are_documents: bool = samples_option()
    broadcast_budget: int = bytes_option(
        512 * 2**20,
        "Largest frequent set (and selection) shipped whole to every task; above it, a "
        "distributed join (and a decode by key range). Bytes (default: 512M; 2G, ...).",
    )
    unit_tokens: int = unit_tokens_option()
    key_ranges: int = option(
        0,
        "At least this many key ranges (tasks) per pass of a build (refresh sizes its "
        "own); more bound each task's memory (0: by volume and cores).",
        minimum=0,
    )
    rank_rows: int = option(
        4_000_000,
        "Rows per rank task; a larger (count, length) group is split by its leading tokens.",
        parse=lambda v: parse_count(v, "--rank-rows"),
        minimum=1,
        metavar="N",
    )
    overwrite: bool = overwrite_option(
        "an existing TABLE (only an fgram output: a folder holding a manifest.json, or an "
        "empty one)"
    )
    resume: bool = option(
        False,
        "Continue an unfinished run on the same TABLE, INPUTS and options from its last "
        "completed pass and counted units (without it, leftovers are removed).",
    )
    engine: str = engine_option()
    master: str | None = master_option()
    conf: dict[str, str] = conf_option()
    storage: dict[str, str] = storage_option()  # secrets inside: the manifest masks them
    work_dir: Location | None = option(
        None,
        "Folder or URI for the run's intermediates (default: beside a local TABLE; for an "
        "object-store TABLE, this machine's cache in local mode, else beside TABLE on the "
        "store).",
        place=True,
    )
    work_budget: int | None = bytes_option(
        None,
        "Most bytes the run's work files may take (50G, ...): refused before it starts "
        "when its estimate is over (6.5 bytes per input token at the default --unit-tokens, "
        "5.3 at 128M and over: larger units write less), stopped when a pass would go over "
        "(its completed passes kept for --resume). Default: no limit.",
    )
    strict: bool = strict_option()
    tokenizer: str | None = option(
        None,
        "INPUTS are text (as for `fgram tokenize`): tokenize them with this tokenizer.json "
        "(or its folder) first, into a folder of the run, then count.",
    )
    text_field: str = text_field_option()
    doc_per_line: bool = doc_per_line_option()
    tokenizer_backend: str = tokenizer_backend_option()
    canonical: bool = canonical_option("Count")
    # the canonical map of a --canonical run (uint32 [vocab]), set by the driver: the
    # manifest records its sha256, not the array
    token_map: Any = field(default=None, repr=False, compare=False)

    def own_checks(self) -> None:
        if not self.inputs:
            raise ConfigError("no input given")
        if not 2 <= self.max_len <= 8:
            raise ConfigError(f"--max-len must be in 2..8, got {self.max_len}")

    def record(self) -> dict[str, Any]:
        """As the manifest shows it (`Options.record`), a canonical run's map as its
        sha256."""
        from fgram.pipeline.text.canonical import map_sha256

        rec = super().record()
        rec.pop("token_map")  # a canonical run's: its map's sha256 (others as they were)
        if self.token_map is not None:
            rec["token_map"] = map_sha256(self.token_map)
        return rec


@dataclass
class AnnotateConfig(ReadsShards, Options):
    """`fgram annotate` and `fgram coverage` (no output)."""

    table: Location = field(metadata=PLACED)
    inputs: list[str]
    output: Location | None = option(
        None, "Tags folder (published atomically).", short="-o", place=True
    )  # None: coverage only, nothing written
    column: str = column_option()
    dtype: str | None = dtype_option()
    doc_sep: int | None = doc_sep_option()
    samples_are_documents: bool = samples_option()
    unit_tokens: int = unit_tokens_option()
    overwrite: bool = overwrite_option("an existing output")
    engine: str = engine_option()
    master: str | None = master_option()
    conf: dict[str, str] = conf_option()
    storage: dict[str, str] = storage_option()  # secrets inside: the manifest masks them
    strict: bool = strict_option()
    tokenizer: str | None = option(
        None,
        "INPUTS are text (as for `fgram tokenize`): tokenize them with this tokenizer.json "
        "(or its folder) first, into a folder of the run beside TABLE.",
    )
    sizes: list[int] | None = option(
        None,
        "Also the coverage of the table's first S' f-grams, for each S' of this list (e.g. "
        "10K,100K,1M): what a build at --size S' would match, all from one pass. Sizes "
        "above the table's rows need a table that kept every n-gram it could.",
        parse=parse_counts,
        metavar="S,S,...",
    )
    text_field: str = text_field_option()
    doc_per_line: bool = doc_per_line_option()
    tokenizer_backend: str = tokenizer_backend_option()
    layout: str = option(
        "fgram",
        "How the tags' files are laid out, for the trainer that reads them: "
        + "; ".join(f"{k}: {v.about}" for k, v in LAYOUTS.items())
        + " (docs/formats.md).",
        choices=tuple(LAYOUTS),
    )
    canonical: bool = canonical_option("Match")
    token_map: Any = field(default=None, repr=False, compare=False)  # set by the job


@dataclass
class TokenizeConfig(Options):
    """`fgram tokenize`."""

    inputs: list[str]
    output: Location = option(
        dataclasses.MISSING, "The token shards' folder (or URI).", short="-o", place=True
    )
    tokenizer: str = option(
        dataclasses.MISSING,
        "A Hugging Face tokenizer.json, or a folder holding one (extra: tokenizers).",
    )
    format: str = option(
        "parquet",
        "parquet: doc_id, tokens list<int32>, source, row; bin: raw uint16 (uint32 for "
        "vocabularies over 65536), each document followed by --doc-sep.",
        choices=("parquet", "bin"),
    )
    text_field: str = text_field_option()
    id_field: str | None = option(None, "A field kept beside the tokens as `id`.")
    doc_per_line: bool = doc_per_line_option()
    tokenizer_backend: str = tokenizer_backend_option()
    add_special_tokens: bool = option(
        False, "Add the tokenizer's special tokens (its template, e.g. BOS) to each document."
    )
    skip_bad_records: bool = option(
        False,
        "Count a malformed record (per file, in the manifest) and go on, instead of failing.",
    )
    max_record_bytes: int = bytes_option(
        32 * 2**20,
        "A record (a JSON line, a .txt document) larger than this is a bad record: a "
        "tokenizer holds tens of times a document's size while it encodes it (default: 32M).",
        minimum=1,
    )
    dtype: str | None = option(
        None,
        "bin: the token dtype (default: uint16 when the vocabulary fits, else uint32).",
        choices=("uint16", "uint32"),
    )
    doc_sep: int | None = option(
        None, "bin: the separator id (default: the tokenizer's end-of-text token).", minimum=0
    )
    shard_tokens: int = option(
        16 * 2**20,
        "About how many tokens each output shard holds (a count: 16777216, 16M).",
        parse=lambda v: parse_count(v, "--shard-tokens"),
        minimum=1,
        metavar="N",
    )
    unit_bytes: int = bytes_option(
        64 * 2**20,
        "Input bytes per task (uncompressed line files are split at line starts; "
        "compressed files are a task each; default: 64M).",
        minimum=1,
    )
    storage: dict[str, str] = storage_option()  # secrets inside: the manifest masks them
    engine: str = engine_option()
    master: str | None = master_option()
    conf: dict[str, str] = conf_option()
    overwrite: bool = overwrite_option()
    resume: bool = option(False, "Continue an unfinished run from its finished units.")
    threads: int | None = option(
        None,
        "The tokenizer's threads in each task (default: twice the task's share of the "
        "cores, at most all; 0: a thread per core of the machine in every task).",
        minimum=0,
    )

    def text_options(self) -> TextOptions:
        from fgram.pipeline.text.text import TextOptions

        return TextOptions(
            self.text_field,
            self.id_field,
            self.doc_per_line,
            self.skip_bad_records,
            self.storage,
            self.max_record_bytes,
        )


FLOATS = ("float16", "bfloat16", "float32")  # the store's row types


@dataclass
class EmbedConfig(Options):
    """`fgram embed`."""

    table: Location = field(metadata=PLACED)  # a build output
    model: str = option(
        dataclasses.MISSING,
        "module:factory; factory() returns model(tokens int32 [B, K], lengths [B]) -> "
        "[B, d] (e.g. fgram.pipeline.models:hashed).",
    )
    batch: int = option(4096, "F-grams per model call.", minimum=1)
    float: str = option("float16", "Stored row type.", choices=FLOATS)
    chunk_rows: int = option(
        1 << 16, "Rows per chunk: a killed run resumes from its last finished chunk.", minimum=1
    )
    device: str | None = option(
        None, "Passed to the model factory as device=... (e.g. cpu, cuda; torch models)."
    )
    engine: str = engine_option(
        "auto: every chunk in this process when Spark would run on this machine alone (a "
        "local master, no --conf, no Spark session or spark-submit), else spark; spark: "
        "chunks as Spark tasks; local: every chunk in this process without a JVM."
    )
    overwrite: bool = overwrite_option("existing embeddings")
    master: str | None = master_option()
    conf: dict[str, str] = conf_option()
    storage: dict[str, str] = storage_option()  # secrets inside
    # a table whose embeddings (same model, same row type) give the rows of the f-grams it
    # holds too, copied instead of computed: a refresh's previous version
    reuse: Location | None = field(default=None, metadata=PLACED)


@dataclass
class ReportConfig(Options):
    """`fgram report`."""

    # a build output, a refresh folder or an annotate output
    table: Location = field(metadata=PLACED)
    output: Location = option(
        REPORT_PAGE,
        "The page (a path or a URI); its numbers go beside it as <name>.json.",
        short="-o",
        place=True,
    )
    heldout: list[str] = option(
        [],
        "Held-out token shards (repeatable; files, folders, globs; read with the shard "
        "options below), or JSON Lines / .txt text tokenized with --tokenizer: the page "
        "adds the coverage-vs-S curve (needs TABLE/index: fgram index TABLE).",
        metavar="SHARDS",
        parse=list,
        repeat=True,
    )
    sizes: list[int] | None = option(
        None,
        "The curve's sizes S (e.g. 10K,100K,1M); default: 1, 2, 5 x 10^k up to the "
        "table's f-grams.",
        parse=parse_counts,
        metavar="S,S,...",
    )
    tokenizer: str | None = option(
        None,
        "A Hugging Face tokenizer.json (or its folder) to show f-grams as text and tokenize "
        "held-out text (default: the one the table's manifest names, when found here).",
    )
    top: int = option(TOP, "F-grams listed per length.", minimum=0)
    engram: str | None = option(
        None, "An Engram configuration (TOML or JSON): the page adds its collision audit "
        "(`fgram engram-audit`) of TABLE, a table built with --canonical.", metavar="CONFIG",
    )  # fmt: skip
    points: int = 64  # ranks per length on the rank-frequency curves
    diffs: bool = option(
        True,
        "A refresh folder: each version's diff from the one before (--no-diffs: leave them "
        "out; a diff holds both tables' keys in memory).",
        spelled="--diffs/--no-diffs",
    )
    overwrite: bool = overwrite_option("an existing page and JSON")
    storage: dict[str, str] = storage_option()
    # the held-out shards' reading and coverage: `AnnotateConfig`'s fields (dtype, doc_sep, ...)
    coverage: dict[str, Any] = field(default_factory=dict)

    def own_checks(self) -> None:
        if self.points < 2:
            raise ConfigError(f"points must be >= 2, got {self.points}")
        if self.sizes is not None and not self.heldout:
            raise ConfigError("--sizes sets the coverage curve's grid: give --heldout shards")
