"""A run's result for schedulers (``--json``): one JSON object on stdout at the end, its
schema `SCHEMA` version `VERSION` (docs/formats.md, "The result of a run"); the closing
lines, progress and logs on stderr. Without ``--json`` the closing lines go to stdout, as
they always have.

A command that runs a job ends with `finished`; every failure ends in `failed` (called
by `options.fail` and by `cli.main`'s endings), so a scheduler reads a status whatever
happened: ``built``, ``unchanged``, ``planned`` (exit 0) or ``failed`` (exit 2, 1 or
130)."""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import click

SCHEMA = "fgram-result"
VERSION = 2  # 2: the schema's own version is "schema_version" (was "version")
WRITE_TABLE = ("build", "refresh", "index", "embed")  # their TABLE is what they write


class _Run:
    """This process's command: whether it speaks JSON, and its result once printed."""

    def __init__(self) -> None:
        self.json = False
        self.command: str | None = None
        self.output: str | None = None
        self.printed = False
        self.reporters: list[Any] = []  # OpenLineage events, a Dagster Pipes session

    def expect(self, args: list[str]) -> None:
        """From the command line, before click parses it: a usage error is a result too."""
        words = args[: args.index("--")] if "--" in args else args
        self.json, self.output, self.printed = "--json" in words, None, False
        self.reporters = []
        self.command = next((w for w in words if not w.startswith("-")), None)


RUN = _Run()


def json_option(fn):
    """``--json`` and ``--openlineage`` for a command that runs a job (`finished` then
    prints its result and sends its last lineage event)."""

    @click.option(
        "--openlineage",
        "lineage",
        is_flag=True,
        help="Send OpenLineage START and COMPLETE/FAIL events (inputs, outputs, counts) "
        "through the client's configured transport; on by itself when OPENLINEAGE_URL or "
        "OPENLINEAGE_CONFIG is set (extra: lineage).",
    )
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the run's result as one JSON object on stdout at the end (status built, "
        "unchanged, planned or failed; counts, seconds, fingerprint: docs/formats.md); "
        "progress and logs stay on stderr.",
    )
    @functools.wraps(fn)
    def run(*args: Any, as_json: bool, lineage: bool, **kw: Any) -> Any:
        from fgram.dagster import begin as pipes_session
        from fgram.lineage import begin
        from fgram.pipeline.config.options import parse_pairs

        ctx = click.get_current_context()
        RUN.json, RUN.command = as_json, ctx.info_name
        written = kw.get("output") or (kw.get("table") if RUN.command in WRITE_TABLE else None)
        if written:
            RUN.output = shown(written)
        read = [shown(p) for p in kw.get("inputs") or kw.get("folders") or ()]
        if kw.get("table") and RUN.command not in WRITE_TABLE:
            read.insert(0, shown(kw["table"]))  # the table it reads
        conf = parse_pairs("--conf")(kw.get("conf") or ())  # as the config parses it
        events = begin(RUN.command or "run", read, RUN.output, conf, lineage)
        RUN.reporters = [r for r in (events, pipes_session()) if r is not None]
        return fn(*args, **kw)

    return run


def shown(loc_or_path: Any) -> str:
    """How an output is named to the user: its URI, or its absolute path."""
    from fgram.pipeline.io.storage import is_remote

    text = str(getattr(loc_or_path, "uri", loc_or_path))
    return text if is_remote(text) else os.path.abspath(text)


def say(line: str) -> None:
    """A closing line of the command: stdout, or stderr under ``--json``."""
    click.echo(line, err=RUN.json)


def _emit(result: dict[str, Any]) -> None:
    if RUN.printed:
        return
    RUN.printed = True
    from fgram.version import __version__

    head = {"schema": SCHEMA, "schema_version": VERSION, "command": RUN.command}
    whole = {**head, **result, "fgram_version": __version__}
    if RUN.json:
        sys.stdout.write(json.dumps(whole) + "\n")
        sys.stdout.flush()
    reporters, RUN.reporters = RUN.reporters, []
    for reporter in reporters:  # none fails the run
        try:
            reporter.end(whole)
        except Exception as exc:  # noqa: BLE001 - the result stands; one warning
            sys.stderr.write(f"fgram: warning: {type(reporter).__name__}: not reported ({exc})\n")


EMPTY: dict[str, Any] = {
    "output": None,
    "counts": {},
    "seconds": {},
    "fingerprint": None,
    "version_id": None,
    "previous_version_id": None,
    "details": {},
    "error": None,
}


def finished(lines: list[str], status: str, output: str | None, **fields: Any) -> None:
    """The command's end: its closing ``lines``, and under ``--json`` its result
    (``status`` built, unchanged or planned, the ``output`` URI, and ``fields``: ``counts``,
    ``seconds``, ``fingerprint``, ``version_id``, ``previous_version_id``, ``details``)."""
    for line in lines:
        say(line)
    _emit({**EMPTY, "status": status, "exit_code": 0, "output": output, **fields})


def failed(exit_code: int, kind: str, message: str, kept: str | None = None) -> None:
    """A failed run's result under ``--json`` (nothing otherwise): the error's class and
    its one line, and what was kept for ``--resume``."""
    error = {"class": kind, "message": message, "kept": kept}
    _emit(
        {**EMPTY, "status": "failed", "exit_code": exit_code, "output": RUN.output, "error": error}
    )


def table_fields(manifest: dict[str, Any]) -> dict[str, Any]:
    """A table's counts, seconds and fingerprint, from its manifest."""
    totals = manifest.get("totals", {})
    return {
        "counts": {
            "fgrams": manifest.get("fgrams"),
            "tokens": totals.get("tokens"),
            "documents": totals.get("documents"),
            "cutoff_count": manifest.get("cutoff_count"),
            "by_length": manifest.get("by_length", {}),
        },
        "seconds": {
            "total": manifest.get("seconds"),
            "passes": {str(p["length"]): p.get("seconds") for p in manifest.get("passes", [])},
            "select": (manifest.get("select") or {}).get("seconds"),
        },
        "fingerprint": manifest.get("run_fingerprint"),
    }
