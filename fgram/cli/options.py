"""What the commands share: their options made from their configs' fields
(`config_options`), the one-line failure, and how an output is named to the user."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, NoReturn

import click

from fgram.cli.results import failed, shown

__all__ = ["fail", "shown", "summary", "config_options"]


def fail(message: str, at_once: bool = False, kind: str = "UsageError") -> NoReturn:
    """The one line of a failed command, exit status 2 (and under ``--json`` its result,
    ``kind`` the error's class). ``at_once``: without the exit's handlers (an object store
    that froze: Arrow's S3 finalizer would wait for a request still hanging in another
    thread, up to its time-outs again)."""
    from fgram.jobs.progress import PROGRESS

    PROGRESS.end(finished=False)
    message = one_line(message)
    failed(2, kind, message)
    click.echo(f"fgram: error: {message}", err=True)
    if at_once:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)
    sys.exit(2)


def one_line(message: str) -> str:
    """A message on one line whatever it quotes: a line break or another control character
    in a file's name is written as its escape (``\\n``), so the error stays one line."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class Interrupted(Exception):
    """Ctrl-C in a command (click would print a blank line for a KeyboardInterrupt)."""


def parse_storage(values) -> dict[str, str]:
    from fgram.pipeline.config.options import parse_pairs

    return parse_pairs("--storage-option")(values)


def summary(manifest: dict, where: str) -> str:
    """A build's line; a table smaller than its -S says why (every n-gram of at least
    --min-count kept: the corpus has no more)."""
    size, made = manifest["config"].get("size"), manifest["fgrams"]
    short = ""
    if size is not None and made < size:
        from fgram.pipeline.config.options import human

        short = (
            f" (all n-grams with count >= {manifest['config']['min_count']}: fewer than "
            f"-S {human(size)})"
        )
    return (
        f"{made} f-grams{short} from {manifest['totals']['tokens']} tokens "
        f"({manifest['totals']['documents']} documents), cutoff count "
        f"{manifest['cutoff_count']}, in {manifest['seconds']:.1f}s -> {where}"
    )


def part_shown(table: str, part: str, storage) -> str:
    """Where TABLE/<part> (a refresh folder's: in its current version) is, as the user is
    shown it."""
    from fgram.pipeline.tables.versions import resolve_table

    return shown(resolve_table(table, parse_storage(storage)).child(part))


def config_options(cls, exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None):
    """The click options of a config class's option fields (`pipeline.config.option`):
    each one's flag, default, help and type come from its field, so a command and its
    Python function take the same names. ``exclude``/``only``: which fields."""
    import typing

    from fgram.pipeline.config.options import options_of

    # a place (a `Location` in the config) is a path or URI on the command line; its
    # module (pyarrow's filesystems) is not imported to make the options
    hints = typing.get_type_hints(cls, localns={"Location": str})
    fields = options_of(cls)
    names = [n for n in (only or fields) if n not in exclude]

    def decorate(fn):
        for name in reversed(names):
            f, o = fields[name]
            required = f.default is f.default_factory is dataclasses.MISSING
            default = None if f.default is dataclasses.MISSING else f.default
            flags = [o.flag(name)] + ([o.short] if o.short else [])
            kw: dict[str, Any] = {"help": o.help, "metavar": o.metavar, "required": required}
            if o.repeat:
                kw.update(multiple=True)
            elif hints[name] is bool:
                kw.update(is_flag=True, default=default)
            else:
                if not required:  # click takes a default given, None too, as a value
                    kw.update(default=default, show_default=o.show_default and default is not None)
                if o.choices is not None:
                    kw["type"] = click.Choice(list(o.choices))
                elif o.parse is not None:  # a string the config parses ("1M", "512M")
                    kw["type"] = str
                elif int in typing.get_args(hints[name]) + (hints[name],):
                    kw["type"] = int  # its bounds: the config's (one message, API and CLI)
            fn = click.option(*flags, name, **kw)(fn)
        return fn

    return decorate
