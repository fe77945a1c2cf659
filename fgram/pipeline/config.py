"""Typed configuration of each command (after dolma): validated once, recorded in the manifest."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import ConfigError
from .failures import public_options
from .reading import FLAT_DTYPES, ReadOptions
from .storage import is_remote


class ReadsShards:
    """A job's options for reading its shards (`inputs.ReadOptions`), shared by every job
    config that has them as fields."""

    column: str
    dtype: str
    doc_sep: int | None
    storage: dict[str, str]
    strict: bool

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
    overwrite: bool = False
    resume: bool = False
    engine: str = "spark"
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    storage: dict[str, str] = field(default_factory=dict)  # --storage-option (secrets inside)
    work_dir: str | None = None  # where the staging folder goes (see build.work_location)
    strict: bool = False  # a flat file whose sample looks wrong fails (`guards`)

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
        return self

    def record(self) -> dict[str, Any]:
        """As the manifest shows it: the output as a URI or absolute path, no secret."""
        rec = asdict(self)
        rec["output"] = self.output if is_remote(self.output) else os.path.abspath(self.output)
        rec["storage"] = public_options(self.storage)
        return rec
