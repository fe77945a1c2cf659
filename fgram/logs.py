"""fgram's log: the standard `logging` logger ``fgram``. The library only emits records
(the driver one line per finished stage, at INFO); nothing shows unless the
application configures logging. The command line shows them on stderr as
``fgram: ...`` lines (`show`), at the level of ``--log-level`` (INFO by default,
DEBUG with ``debug``, nothing with ``-q``)."""

from __future__ import annotations

import logging
import sys

LOG = logging.getLogger("fgram")
LOG.addHandler(logging.NullHandler())
_SHOWN: list[logging.Handler] = []  # the handlers `show` installed


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record (a test runner swaps it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def hide() -> None:
    """Undo `show`: the records go to the application's logging again."""
    while _SHOWN:
        LOG.removeHandler(_SHOWN.pop())
    LOG.propagate = True


def show(stream=None, level: int = logging.INFO) -> None:
    """Show fgram's records on ``stream`` (default: the current stderr) from ``level`` up,
    as ``fgram: <message>``; replaces what an earlier call set up."""
    hide()
    handler = logging.StreamHandler(stream) if stream is not None else _Stderr()
    _SHOWN.append(handler)
    handler.setFormatter(logging.Formatter("fgram: %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(level)
    LOG.propagate = False  # the application's root handlers would print it twice
