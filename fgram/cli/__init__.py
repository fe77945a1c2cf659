"""The `fgram` command: the group, its endings (`main`) and its commands (`make`: the
commands that write tables and corpora; `use`: those that read a table; `options`: what
they share)."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from typing import NoReturn

import click

from fgram.cli import engram, make, report, use
from fgram.cli.options import Interrupted, fail, one_line
from fgram.cli.results import RUN, failed
from fgram.pipeline.errors import FgramError, StorageUnavailable
from fgram.version import __version__

# the group's options: values they take
GLOBAL = {"-q": 0, "--quiet": 0, "--log-level": 1, "--config": 1, "--log-file": 1}
SIGINTS: list[int] = []  # Ctrl-C seen by this process (`note_sigint`)


def note_sigint() -> None:
    """Ctrl-C noted as well as raised: it also reaches the Spark and worker processes
    of the group, whose failure may come back to the driver before its own
    KeyboardInterrupt does; a run that saw one ends as interrupted whatever comes first."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # not the main thread's default: someone else's handler, left alone

    def on_sigint(signum, frame):
        SIGINTS.append(signum)
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)  # its connections' ends
        session = sys.modules.get("fgram.spark.session")
        if session is not None:  # the JVM's own lines while it shuts down
            session.MUTED.append(True)
        signal.default_int_handler(signum, frame)

    on_sigint.fgram_sigint = True  # type: ignore[attr-defined]  # kept over Spark's start
    signal.signal(signal.SIGINT, on_sigint)
    logging.root.addFilter(quiet_after_sigint)


def quiet_after_sigint(record: logging.LogRecord) -> bool:
    """After a Ctrl-C, py4j's own tracebacks of the call it interrupted (logged on the root
    logger: "KeyboardInterrupt while sending command."; its own loggers' are silenced in
    `note_sigint`) are dropped: the run ends in one line (`main`)."""
    return not (SIGINTS and f"{os.sep}py4j{os.sep}" in record.pathname)


def hoisted(args: list[str]) -> list[str]:
    """The group's options (``-q``, ``--log-level``) moved before the command, wherever they
    were given (``fgram build ... -q`` as ``fgram -q build ...``); ``--`` ends the search."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name, eq, _ = arg.partition("=")
        if name in GLOBAL:
            n = 1 + (0 if eq else GLOBAL[name])
            front += args[i : i + n]
            i += n
            continue
        rest.append(arg)
        i += 1
    return front + rest


class _Commands(click.Group):
    """Every command's endings in one place: an `FgramError` (bad input, options or
    output) is one line and exit status 2; Ctrl-C is `Interrupted` (see `main`). The
    group's options may follow the command (`hoisted`)."""

    def parse_args(self, ctx, args):
        RUN.expect(list(args))  # --json: even a usage error ends in a result
        return super().parse_args(ctx, hoisted(list(args)))

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:  # a usage error: under --json, a result too
            failed(exc.exit_code, type(exc).__name__, exc.format_message())
            raise
        except KeyboardInterrupt as exc:
            raise Interrupted(getattr(exc, "fgram_kept", None)) from None
        except FgramError as exc:
            kept = getattr(exc, "fgram_kept", None)  # a store down, a disk full: work kept
            if SIGINTS:  # a task's failure under the same Ctrl-C came back first
                raise Interrupted(kept) from None
            fail(
                f"{exc}{'; ' + kept if kept else ''}",
                at_once=isinstance(exc, StorageUnavailable),
                kind=type(exc).__name__,
            )


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="fgram")
@click.option(
    "--log-level",
    type=click.Choice(["off", "error", "warn", "info", "debug"]),
    default=None,
    help="Spark's log messages at this level and above (default: error; "
    "$FGRAM_LOG_LEVEL); fgram's own stage lines show at every level but off. debug also "
    "shows fgram's debug records and keeps the JVM's start-up lines.",
)
@click.option("-q", "--quiet", is_flag=True, help="No log messages at all (--log-level off).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Options from a TOML (or YAML) file: top-level keys for every command, a "
    "[command] table for one; the command line wins.",
)
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append every line fgram writes to stderr to this file too.",
)
@click.pass_context
def cli(ctx, log_level, quiet, config_file, log_file) -> None:
    """fgram: exact frequent n-grams (f-grams) of tokenized corpora, on Apache Spark.

    -q, --log-level, --config and --log-file go before the command or anywhere after it.

    \b
    fgram synth -o corpus --tokens 10000000   # a small corpus to try (Parquet)
    fgram build fgrams corpus
    fgram show fgrams
    fgram index fgrams
    fgram lookup fgrams --tokens 13631,29905,38357,9808
    """
    from fgram.cli.settings import defaults_for, log_to
    from fgram.jobs.progress import PROGRESS
    from fgram.spark.session import LOG_LEVEL
    from fgram.spark.session import log_level as effective_level

    try:
        if log_file:
            log_to(log_file)
        if config_file:
            ctx.default_map = defaults_for(config_file, cli, ctx.invoked_subcommand)
    except FgramError as exc:
        fail(str(exc), kind=type(exc).__name__)
    if quiet or log_level:
        os.environ[LOG_LEVEL] = "off" if quiet else log_level
    level = effective_level()
    if level == "off":
        PROGRESS.disable()
    else:  # stage lines (INFO) always; fgram's debug records with debug
        PROGRESS.enable(level=logging.DEBUG if level == "debug" else logging.INFO)


for command in (
    make.build_command,
    make.refresh_command,
    make.tokenize_command,
    make.synth_command,
    make.clean_command,
    use.show_command,
    use.diff_command,
    use.index_command,
    use.annotate_command,
    use.coverage_command,
    report.report_command,
    use.embed_command,
    use.lookup_command,
    use.verify_command,
    engram.engram_audit_command,
):
    cli.add_command(command)


def _interrupted(kept: str | None) -> NoReturn:
    failed(130, "Interrupted", "interrupted", kept)
    click.echo(f"fgram: interrupted{'; ' + kept if kept else ''}", err=True)
    sys.exit(130)


def main() -> None:
    """The `fgram` command: every way a run can end is one line on stderr (a traceback only
    with --log-level debug), exit 0, 2 (bad input or options: `FgramError`), 1 (anything
    else, e.g. a failed Spark job) or 130 (interrupted)."""
    from fgram.jobs.progress import PROGRESS

    note_sigint()
    try:
        finished = False
        try:
            cli.main(prog_name="fgram", standalone_mode=False)
            finished = True
        finally:
            PROGRESS.end(finished)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        failed(exc.exit_code, type(exc).__name__, exc.format_message())
        exc.show()
        sys.exit(exc.exit_code)
    except (Interrupted, click.exceptions.Abort, KeyboardInterrupt) as exc:
        _interrupted(exc.args[0] if isinstance(exc, Interrupted) and exc.args else None)
    except Exception as exc:  # noqa: BLE001 - one line instead of a py4j traceback
        if SIGINTS:  # the Ctrl-C reached a worker, whose failure came back first
            _interrupted(getattr(exc, "fgram_kept", None))
        from fgram.pipeline.errors import task_failure
        from fgram.spark.session import log_level

        if log_level() == "debug":
            import traceback

            traceback.print_exc()
        line, _ = task_failure(str(exc)) if str(exc) else (type(exc).__name__, None)
        line = one_line(line)
        from fgram.spark.session import jvm_ended

        # a refused connection after the JVM died: say why it died (it may still be going)
        ended = jvm_ended(wait=2.0 if "Connection refused" in line else 0.0)
        if ended is not None:
            line = ended
        if "Too many open files" in line:  # EMFILE: say the limit and what to do
            import resource

            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            line += (
                f" (this process may open {soft} files: ulimit -n; raise it, or give "
                f"larger --unit-tokens for fewer units)"
            )
        kept = getattr(exc, "fgram_kept", None)
        named = re.match(r"(\w+): ", line)
        failed(1, named.group(1) if named else type(exc).__name__, line, kept)
        click.echo(f"fgram: error: {line}{'; ' + kept if kept else ''}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
