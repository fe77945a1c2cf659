"""Options as config fields: a field made with `option` carries its default, its help
and how a string becomes its value (``"1M"``, ``"10K,100K"``, ``("k=v", ...)``); the
command line's options are made from these fields (`fgram.cli.options.config_options`).
`Options.validate` checks every command's options one way (a `ConfigError` naming the
option). The options several commands share are made here once (`engine_option`, ...).
Nothing heavy is imported: the command line's start reads this module."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.dtypes import TOKEN_DTYPES

# defaults several commands and functions share, written once
KEEP_VERSIONS = 3  # refresh: the versions kept
TOP = 10  # show, diff, report: the f-grams listed
OPEN_MODE = "mmap"  # FgramIndex.open, FgramStore.open, lookup: arrays mapped from disk
REPORT_PAGE = "report.html"  # report: the page written

_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgbt]?)\s*$", re.I)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9, "t": 10**12}


def parse_count(text: str | int, flag: str = "") -> int:
    """'10K', '2.5M', '1B', '1048576' -> a whole number (decimal suffixes)."""
    if isinstance(text, int):
        return text
    m = _COUNT.match(str(text))
    value = float(m.group(1)) * _SCALE[m.group(2).lower()] if m else -1
    if not m or value != int(value):
        what = f"{flag}: " if flag else ""
        raise ConfigError(f"{what}{str(text).strip()!r} is not a count (examples: 10K, 1M, 2.5M)")
    return int(value)


def parse_counts(text: str | Iterable[int], flag: str = "--sizes") -> list[int]:
    """'10K,100K,1M' (or numbers) -> [10000, 100000, 1000000], ascending and distinct; a
    one-line error naming a bad item."""
    items = str(text).split(",") if isinstance(text, str) else list(text)
    sizes = []
    for item in items:
        try:
            value = parse_count(item)
        except ConfigError:
            value = 0
        if value < 1:
            raise ConfigError(
                f"{flag}: {str(item).strip()!r} is not a number of f-grams (examples: 10K,1M,2.5M)"
            )
        sizes.append(value)
    return sorted(set(sizes))


def human(n: int) -> str:
    """10000 -> '10K', 2500000 -> '2.5M', 1234 -> '1234' (the spelling `parse_count` reads)."""
    for suffix, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale and (n * 10) % scale == 0:
            return f"{n / scale:g}{suffix}"
    return str(n)


def parse_bytes(text: str | int) -> int:
    """'512M', '2G', '1048576' -> bytes."""
    from fgram.pipeline.io.cache import parse_size

    return parse_size(text)


def parse_pairs(flag: str) -> Callable[[Iterable[str]], dict[str, str]]:
    """``("k=v", ...)`` -> ``{"k": "v"}``, for the repeatable option ``flag``."""

    def parse(pairs: Iterable[str]) -> dict[str, str]:
        out = {}
        for item in pairs:
            key, sep, value = str(item).partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"{flag}: expected KEY=VALUE, got {item!r}")
            out[key.strip()] = value.strip()
        return out

    return parse


@dataclass(frozen=True)
class Opt:
    """How a config field is a command-line option: its help, its spelling, and how a
    string (or a repeated KEY=VALUE) becomes its value."""

    help: str
    short: str | None = None  # e.g. "-S"
    choices: tuple[str, ...] | None = None
    parse: Callable[[Any], Any] | None = None  # applied to a str (or tuple) value
    minimum: int | None = None
    metavar: str | None = None
    show_default: bool = True
    repeat: bool = False  # a repeatable KEY=VALUE option (parse gives the dict)
    spelled: str | None = None  # the flag, when not --<name with dashes>

    def flag(self, name: str) -> str:
        return self.spelled or "--" + name.replace("_", "-")


PLACE = "place"  # a field's metadata key: the field names a place, held as a `Location`
PLACED = {PLACE: True}  # the metadata of such a field that is an argument (TABLE, OUTPUT)


def option(default: Any, help: str, place: bool = False, **kw: Any) -> Any:
    """A config field that is also an option of its command (`Opt`'s keywords);
    ``dataclasses.MISSING``: a required one. ``place``: its value names a place, held as
    a `Location`."""
    meta: dict[str, Any] = {"option": Opt(help, **kw)}
    if place:
        meta[PLACE] = True
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.copy(default), metadata=meta)
    return field(default=default, metadata=meta)


def options_of(cls: type) -> dict[str, tuple[dataclasses.Field[Any], Opt]]:
    """A config class's option fields, by name, in order."""
    return {
        f.name: (f, f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata
    }


Self_ = TypeVar("Self_", bound="Options")


class Options:
    """A command's typed options. Values given as strings (the command line, or a Python
    caller's ``size="1M"``) are parsed by their field's `Opt.parse` when made; a place
    (a field with `PLACED` metadata, or an option with ``place=True``) given as a path or URI
    becomes a `Location` with the config's storage options, once: the config is a door
    of the library, past which every place is a `Location`."""

    def __post_init__(self) -> None:
        for name, (_, o) in options_of(type(self)).items():
            value = getattr(self, name)
            if o.parse is not None and isinstance(value, (str, tuple)):
                setattr(self, name, o.parse(value))
        for name in self.places():
            value = getattr(self, name)
            if isinstance(value, (str, os.PathLike)):
                from fgram.pipeline.io.publish import as_location

                setattr(self, name, as_location(os.fspath(value), getattr(self, "storage", None)))

    @classmethod
    def places(cls) -> list[str]:
        """The names of the fields that hold a place."""
        return [f.name for f in dataclasses.fields(cls) if f.metadata.get(PLACE)]  # type: ignore[arg-type]

    def record(self) -> dict[str, Any]:
        """The options as a manifest shows them: a place as its URI (a local one as its
        absolute path), the storage options without their secrets."""
        places = self.places()
        rec: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            placed = f.name in places and value is not None
            rec[f.name] = value.uri if placed else copy.deepcopy(value)
        if "storage" in rec:
            from fgram.pipeline.io.failures import public_options

            rec["storage"] = public_options(rec["storage"])
        return rec

    def validate(self: Self_) -> Self_:
        """Every option's choices and bounds, then the command's own checks (`own_checks`);
        returns the config. A bad option is a `ConfigError` that names it."""
        for name, (_, o) in options_of(type(self)).items():
            value = getattr(self, name)
            if value is None:
                continue
            if o.choices is not None and value not in o.choices:
                raise ConfigError(
                    f"{o.flag(name)} must be one of {', '.join(o.choices)}, got {value!r}"
                )
            if o.minimum is not None and value < o.minimum:
                raise ConfigError(f"{o.flag(name)} must be >= {o.minimum}, got {value}")
        self.own_checks()
        return self

    def own_checks(self) -> None:
        """The command's own checks beyond choices and bounds (none by default)."""


ENGINES = ("auto", "spark", "local")

ENGINE_HELP = (
    "auto: local processes when Spark would run on this machine alone (a local master, "
    "no --conf, no Spark session or spark-submit: the JVM would add its start and "
    "nothing else), else spark; spark: Spark always; local: the same tasks in local "
    "processes without a JVM."
)


def engine_option(
    help: str = ENGINE_HELP, default: str = "auto", choices: tuple[str, ...] = ENGINES
) -> Any:
    return option(default, help, choices=choices)


def master_option() -> Any:
    return option(None, "Spark master URL (default: local[*]).")


def conf_option() -> Any:
    return option(
        {},
        "Extra Spark configuration (repeatable).",
        parse=parse_pairs("--conf"),
        metavar="KEY=VALUE",
        repeat=True,
    )


def storage_option() -> Any:
    return option(
        {},
        "Object-store setting (repeatable): a keyword of the scheme's pyarrow filesystem, "
        "e.g. endpoint_override=http://127.0.0.1:8333, region=eu-west-1. Credentials "
        "otherwise come from the environment (AWS_ACCESS_KEY_ID, ...) and config files.",
        parse=parse_pairs("--storage-option"),
        metavar="KEY=VALUE",
        repeat=True,
        spelled="--storage-option",
    )


def overwrite_option(what: str = "an existing output (an fgram one)") -> Any:
    return option(False, f"Replace {what}.")


def text_field_option() -> Any:
    return option(
        "text", "The JSON field (a dotted path for nested ones) or Parquet column of the text."
    )


# the backends of `fgram.pipeline.text.backends` (its CHOICES, held equal by a test),
# named here without importing it (numpy): the command line's options are made cheaply
TOKENIZER_BACKENDS = ("auto", "fastokens", "tokenizers")


def tokenizer_backend_option() -> Any:
    return option(
        "auto",
        "What encodes the text: auto (the fastest installed backend proven to give this "
        "tokenizer's ids exactly, on hard cases and a sample of the run's documents; "
        "else tokenizers), tokenizers (Hugging Face's), fastokens.",
        choices=TOKENIZER_BACKENDS,
    )


def doc_per_line_option() -> Any:
    return option(False, ".txt files: a document per line, not per file.")


def column_option() -> Any:
    return option("tokens", "Parquet column holding each document's token ids.")


def dtype_option() -> Any:
    return option(
        None,
        "Token dtype of .bin and header-less .npy files (default: uint16; a `fgram tokenize` "
        "output's from its manifest).",
        choices=tuple(TOKEN_DTYPES),
    )


def doc_sep_option() -> Any:
    return option(
        None,
        "Document separator id in flat files (a `fgram tokenize` output's from its manifest).",
        minimum=0,
    )


def samples_option() -> Any:
    return option(
        False,
        "MDS and LitData: each sample is a document (default: samples are windows of one "
        "token stream, split into documents at --doc-sep).",
    )


def strict_option() -> Any:
    return option(
        False,
        "Fail, instead of warning, when a flat file's sample looks wrong: text, the wrong "
        "--dtype, a missing or absent --doc-sep.",
    )


def bytes_option(default: int | None, help: str, minimum: int = 0) -> Any:
    """A size in bytes, spelled as `parse_bytes` reads it (its default said in ``help``)."""
    return option(
        default, help, parse=parse_bytes, minimum=minimum, metavar="BYTES", show_default=False
    )


def unit_tokens_option() -> Any:
    return option(
        16 * 2**20,
        "Most tokens per task (flat files are split into the fewest equal ranges of at "
        "most this size; a count: 16777216, 16M).",
        parse=lambda v: parse_count(v, "--unit-tokens"),
        minimum=1,
        metavar="N",
    )


def canonical_option(doing: str) -> Any:
    return option(
        False,
        f"{doing} over Engram's canonical token ids (ids whose text, decoded alone, is equal "
        "after normalising share one: fgram.engram.canonical_map of the shards' tokenizer, "
        "which a `fgram tokenize` manifest or --tokenizer names).",
    )
