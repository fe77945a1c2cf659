"""Error classes, named by the policy they imply (after dolma).

- `FgramError` subclasses fail the whole run with one clear line.
- `InputError` names the input file (or option) and what is wrong with it.
- `StorageUnavailable` (an object store that does not answer) and `NoSpace` (a
  full device) stop the run with one line too, but keep its completed work:
  ``--resume`` continues once the store is back or there is room.
- Anything else (a Spark job that failed, an interrupt, a killed driver)
  leaves the run's completed passes in place for ``--resume``.
"""

from __future__ import annotations

import json
from typing import Any

# A marker that survives the trip through a Spark task failure (the Python
# traceback is embedded in the JVM exception text), so the driver raises the
# original error, its class and arguments, instead of a Java stack trace.
MARKER = "FGRAM-ERROR::"


class FgramError(Exception):
    """Fails the run. The message is one line, shown as is."""

    def marker_text(self) -> str:
        """This error as text that `from_marker_text` turns back into an equal one."""
        return MARKER + json.dumps({"class": type(self).__name__, "args": self.marker_args()})

    def marker_args(self) -> list[str]:
        """The constructor's arguments that make this error again."""
        return [str(self)]


class InputError(FgramError):
    """Bad input: the file (or option) and the problem."""

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def marker_args(self) -> list[str]:
        return [self.path, self.problem]

    def __reduce__(
        self,
    ) -> tuple[Any, ...]:  # pickles (to a worker, from a process pool) as it was made
        return type(self), (self.path, self.problem)


class ConfigError(FgramError):
    """A bad option value."""


class OutputError(FgramError):
    """The output location cannot be used (exists, not writable)."""


class LockedError(OutputError):
    """Another live run is writing the same output."""


class StorageUnavailable(FgramError):
    """An object store did not answer (refused, timed out): worth a --resume later."""

    resume_when = "once it answers"


class NoSpace(OutputError):
    """A device full: worth a --resume once there is room (the completed work is kept)."""

    resume_when = "once there is room"


class ClusterUnavailable(FgramError):
    """A cluster with no executor left for a while (its workers gone, or none came)."""

    resume_when = "once the cluster has workers"


# our own verdicts that keep the completed work
RESUMABLE = (StorageUnavailable, NoSpace, ClusterUnavailable)


class WorkerSetupError(FgramError):
    """A task could not start its work where it ran (an import failed there): no retry or
    resume mends that, only the workers' environment."""


def task_failure(text: str) -> tuple[str, str | None]:
    """(the last Python exception line in a failed Spark job's text, or its first line;
    the name of a module a worker could not import, or None)."""
    import re

    found = re.findall(r"^(?:\S+\.)?(\w+(?:Error|Exception|Interrupt)): (.*)$", text, re.M)
    python = [
        (n, m) for n, m in found if not n.startswith(("Py4J", "Spark")) and "java" not in m[:40]
    ]
    crashed = "Python worker exited unexpectedly" in text
    if python:
        name, message = python[-1]
        line = f"{name}: {message.strip()}"
    elif crashed:  # no Python error to show: the worker process itself died
        line = (
            "WorkerDied: a Spark task's Python worker exited unexpectedly (killed, out of "
            "memory, or a crash in native code; its executor's log has the rest)"
        )
    else:
        line = (text.strip().splitlines() or [""])[0]
    missing = None
    m = re.search(r"^(?:ModuleNotFoundError|ImportError): (.*)$", text, re.M)
    if m:
        missing = m.group(1).strip()
    return line[:400], missing


def keeps_work(exc: BaseException) -> bool:
    """Whether a run stopped by ``exc`` keeps its completed work for --resume: every
    failure but our own verdicts on the input, the options or the output."""
    return not isinstance(exc, FgramError) or isinstance(exc, RESUMABLE)


def error_classes() -> dict[str, type[FgramError]]:
    """Every FgramError class by name (subclasses of subclasses too)."""
    found, todo = {}, [FgramError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def from_marker_text(text: str) -> FgramError | None:
    """The FgramError (same class, same arguments) whose `marker_text` ``text`` embeds."""
    start = text.find(MARKER)
    if start < 0:
        return None
    try:
        record, _ = json.JSONDecoder().raw_decode(text, start + len(MARKER))
        cls = error_classes().get(record["class"], FgramError)
        return cls(*record["args"])
    except (ValueError, KeyError, TypeError):
        return FgramError(text[start + len(MARKER) :].splitlines()[0][:400])
