"""The options of the commands that run no job: show, diff, index, lookup, verify, synth
and clean. Each default is written here once; the command's options and the function
of `fgram.api` by the same name are made from these fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fgram.pipeline.config.options import (
    OPEN_MODE,
    PLACED,
    TOP,
    Options,
    option,
    overwrite_option,
    storage_option,
    tokenizer_backend_option,
)

if TYPE_CHECKING:
    from fgram.pipeline.io.storage import Location

MODES = ("mmap", "ram")
SYNTH_FORMATS = ("parquet", "bin", "text")


def tokenizer_option(what: str) -> Any:
    """``--tokenizer``: a tokenizer.json to show f-grams as text (``what``: what for)."""
    return option(
        None,
        f"A Hugging Face tokenizer.json (or its folder) {what} (extra: tokenizers; default: "
        f"the one the table's manifest names, when it is found here).",
        show_default=False,
    )


@dataclass
class ShowConfig(Options):
    """`fgram show TABLE`."""

    table: Location = field(metadata=PLACED)
    top: int = option(TOP, "How many f-grams to list.", minimum=0)
    tokenizer: str | None = tokenizer_option("to print f-grams as text")
    storage: dict[str, str] = storage_option()


@dataclass
class DiffConfig(Options):
    """`fgram diff OLD NEW`."""

    old: Location = field(metadata=PLACED)
    new: Location = field(metadata=PLACED)
    top: int = option(
        TOP, "How many of the most frequent added and removed f-grams to list.", minimum=0
    )
    tokenizer: str | None = tokenizer_option(
        "to print f-grams as text (those of NEW's manifest by default)"
    )
    storage: dict[str, str] = storage_option()


@dataclass
class IndexConfig(Options):
    """`fgram index TABLE`."""

    table: Location = field(metadata=PLACED)
    overwrite: bool = overwrite_option("an existing index")
    storage: dict[str, str] = storage_option()


@dataclass
class LookupConfig(Options):
    """`fgram lookup TABLE --tokens IDS | --text TEXT`."""

    table: Location = field(metadata=PLACED)
    tokens: Any = option(None, "Token ids of one context, separated by commas or spaces.")
    text: str | None = option(None, "The text of one context (needs --tokenizer).")
    tokenizer: str | None = tokenizer_option("that tokenizes --text and shows the matches as text")
    mode: str = option(
        OPEN_MODE,
        "mmap: arrays mapped from disk (shared, opens at once); ram: read into memory.",
        choices=MODES,
    )
    tokenizer_backend: str = tokenizer_backend_option()
    check: bool = option(
        True,
        "Check the index's and the rows' bytes against their XXH3 on open (at memory "
        "speed); --no-check for a store larger than memory (a warning names it unchecked).",
        spelled="--check/--no-check",
    )
    canonical: bool = option(
        False,
        "TABLE was built with --canonical: match the context's Engram canonical ids (by "
        "the table's map).",
    )
    storage: dict[str, str] = storage_option()


@dataclass
class VerifyConfig(Options):
    """`fgram verify TABLE`."""

    table: Location = field(metadata=PLACED)
    deep: bool = option(
        False,
        "Read every byte against its sha256 and check the index's arrays (by default "
        "sizes only: a listing).",
    )
    storage: dict[str, str] = storage_option()


@dataclass
class SynthConfig(Options):
    """`fgram synth -o OUTPUT`."""

    output: str = option(dataclasses.MISSING, "Output folder.", short="-o")
    tokens: int = option(1_000_000, "Corpus size.", minimum=1)
    vocab: int = option(50_000, "Vocabulary size.", minimum=2)
    seed: int = option(0, "Seed of the text (and of the phrase book, unless --book-seed).")
    book_seed: int | None = option(
        None,
        "Seed of the phrase book (default: --seed). The same book with another --seed: new "
        "text from the same distribution (new shards of a corpus).",
    )
    format: str = option(
        "parquet",
        "parquet: doc_id, tokens list<int32>; bin: uint16/uint32 with separator 0; text: "
        "words (JSON Lines, zstd) and the tokenizer.json that gives their ids back.",
        choices=SYNTH_FORMATS,
    )
    files: int | None = option(None, "Number of shard files (default: by size).", minimum=1)
    overwrite: bool = overwrite_option("an existing folder (its files go)")


@dataclass
class CleanConfig(Options):
    """`fgram clean [FOLDER...]`."""

    folders: list[str] = dataclasses.field(default_factory=list)
    cache: bool = option(
        True,
        "Also list fgram's cache ($FGRAM_CACHE_DIR, else ~/.cache/fgram).",
        spelled="--cache/--no-cache",
    )
    remove: bool = option(False, "Delete what is listed (default: only list it).")
