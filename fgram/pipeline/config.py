"""Typed configuration of each command (after dolma): validated once, recorded in the manifest."""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.reading import FLAT_DTYPES, ReadOptions
from fgram.pipeline.io.failures import public_options
from fgram.pipeline.io.storage import is_remote

TOKENS_KIND = "fgram-tokens"  # the manifest of `fgram tokenize`'s output
C = TypeVar("C", bound="ReadsShards")


class ReadsShards:
    """A job's options for reading its shards (`inputs.ReadOptions`), shared by every job
    config that has them as fields."""

    column: str
    dtype: str
    doc_sep: int | None
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
            return self, None
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
        new = copy.copy(self)
        if first["output_format"] == "parquet":
            new.column = "tokens"
        else:
            sep = first["doc_sep"]
            if self.doc_sep is not None and self.doc_sep != sep:
                raise ConfigError(f"--doc-sep {self.doc_sep}: {first_path} is separated by {sep}")
            new.dtype, new.doc_sep = first["dtype"], sep
        return new, first["tokenizer"]

    def read_options(self) -> ReadOptions:
        return ReadOptions(
            column=self.column,
            dtype=self.dtype,
            doc_sep=self.doc_sep,
            storage=self.storage,
            strict=self.strict,
        )


@dataclass
class BuildConfig(ReadsShards):
    inputs: list[str]
    output: str
    max_len: int = 5
    min_count: int = 5
    size: int | None = None
    column: str = "tokens"
    dtype: str = "uint16"
    doc_sep: int | None = None
    broadcast_budget: int = 512 * 2**20
    unit_tokens: int = 16 * 2**20
    key_ranges: int = 0  # at least this many key ranges (tasks) per pass; 0: by volume, cores
    rank_rows: int = 4_000_000  # rows per rank task; a larger (count, length) group is split
    overwrite: bool = False
    resume: bool = False
    engine: str = "spark"
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    storage: dict[str, str] = field(default_factory=dict)  # --storage-option (secrets inside)
    work_dir: str | None = None  # where the staging folder goes (see build.work_location)
    strict: bool = False  # a flat file whose sample looks wrong fails (`guards`)
    tokenizer: str | None = None  # the inputs are text: tokenize them with it first
    text_field: str = "text"  # ... its JSON field or Parquet column
    doc_per_line: bool = False  # ... .txt: a document per line

    def validate(self) -> BuildConfig:
        if not self.inputs:
            raise ConfigError("no input given")
        if not 2 <= self.max_len <= 8:
            raise ConfigError(f"--max-len must be in 2..8, got {self.max_len}")
        if self.min_count < 1:
            raise ConfigError(f"--min-count must be >= 1, got {self.min_count}")
        if self.size is not None and self.size < 1:
            raise ConfigError(f"--size must be >= 1, got {self.size}")
        if self.dtype not in FLAT_DTYPES:
            raise ConfigError(
                f"--dtype must be one of {', '.join(FLAT_DTYPES)}, got {self.dtype!r}"
            )
        if self.broadcast_budget < 0:
            raise ConfigError("--broadcast-budget must be >= 0")
        if self.engine not in ("spark", "local"):
            raise ConfigError(f"--engine must be spark or local, got {self.engine!r}")
        if self.unit_tokens < 1:
            raise ConfigError("--unit-tokens must be >= 1")
        if self.key_ranges < 0:
            raise ConfigError(f"--key-ranges must be >= 0, got {self.key_ranges}")
        if self.rank_rows < 1:
            raise ConfigError(f"--rank-rows must be >= 1, got {self.rank_rows}")
        return self

    def record(self) -> dict[str, Any]:
        """As the manifest shows it: the output as a URI or absolute path, no secret."""
        rec = asdict(self)
        rec["output"] = self.output if is_remote(self.output) else os.path.abspath(self.output)
        rec["storage"] = public_options(self.storage)
        return rec
