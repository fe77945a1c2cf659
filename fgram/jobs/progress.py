"""Progress of a run, for a person watching: driven by task completions, never per token.

A job names its stages (`stage`); the executor reports the tasks of a stage as
they finish (`advance`, or, for a Spark job, `watch`: the driver's status
tracker is read once a second, no Python in the tasks). Where it goes:

- stderr a terminal: a live bar (tqdm) per stage: units done/total, tokens/s,
  elapsed and ETA, redrawn at least once a second;
- otherwise: one line per finished stage, ``fgram: [pass 3/5] ...``, a record of the
  ``fgram`` logger (`fgram.logs`) at INFO (under a bar, at DEBUG);
- nothing unless `enable` was called (the command line does, unless ``-q``):
  the library itself prints nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

from fgram.logs import LOG, hide, show

PREFIX = "fgram: ["  # every stage line starts so (tests and scripts may filter them)


class Progress:
    def __init__(self):
        self.enabled = False
        self._fixed = None
        self._lock = threading.Lock()
        self._stage = None
        self._thread = None

    def enable(self, stream=None, level: int = logging.INFO) -> None:
        """Show progress on ``stream`` (default: whatever sys.stderr is at each stage),
        and fgram's log records from ``level`` up."""
        self.enabled = True
        self._fixed = stream
        show(stream, level)

    def disable(self) -> None:
        """Show nothing (``-q``), whatever an earlier `enable` set up."""
        self.enabled = False
        hide()

    @property
    def _stream(self):
        return self._fixed or sys.stderr

    def stage(self, name: str, total: int = 0, tokens: int = 0, unit: str = "units") -> None:
        """Start stage ``name`` of ``total`` tasks covering ``tokens`` tokens (0: unknown);
        the previous stage ends. Not enabled: no bar, and the stage's line is only a log
        record (shown where the application's logging shows it)."""
        self.end()
        bar = None
        try:
            tty = self.enabled and self._stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        if tty:
            import shutil

            from tqdm import tqdm

            size = shutil.get_terminal_size((100, 20))  # a terminal of size 0: a default
            bar = tqdm(
                total=total or None,
                desc=name,
                unit=f" {unit}",
                file=self._stream,
                ncols=min(size.columns or 100, 120),
                nrows=size.lines or 20,
                leave=True,
                mininterval=0.2,
                bar_format="{desc}: {n_fmt}/{total_fmt}{unit} |{bar}| {elapsed}<{remaining}"
                "{postfix}"
                if total
                else "{desc}: {elapsed}{postfix}",
            )
        with self._lock:
            self._stage = {
                "name": name,
                "total": total,
                "tokens": tokens,
                "unit": unit,
                "done": 0,
                "t0": time.time(),
                "bar": bar,
                "watch": None,
            }
        if bar is not None and self._thread is None:
            self._thread = threading.Thread(
                target=self._refresh, name="fgram-progress", daemon=True
            )
            self._thread.start()

    def advance(self, n: int = 1) -> None:
        st = self._stage
        if st is not None:
            with self._lock:
                st["done"] = min(st["done"] + n, st["total"] or st["done"] + n)

    def watch(self, poll) -> None:
        """While a Spark job runs: ``poll()`` -> its tasks finished so far (added to the
        stage's count at the time of the call); ``watch(None)`` when it is over."""
        st = self._stage
        if st is not None:
            with self._lock:
                st["watch"] = (st["done"], poll) if poll is not None else None

    def _done(self, st) -> int:
        watch = st["watch"]
        if watch is None:
            return st["done"]
        try:
            return min(watch[0] + int(watch[1]()), st["total"] or 1 << 62)
        except Exception:  # noqa: BLE001 - a context stopping: the last known count
            return st["done"]

    def _rate(self, st, done: int) -> str:
        seconds = max(time.time() - st["t0"], 1e-9)
        if st["tokens"] and st["total"]:
            return f", {st['tokens'] * done / st['total'] / seconds / 1e6:.1f}M tokens/s"
        return ""

    def _draw(self, st, done: int) -> None:
        """Set the bar's count and rate (drawn at its next refresh or close)."""
        st["bar"].n = done
        st["bar"].set_postfix_str(self._rate(st, done).lstrip(", "), refresh=False)

    def _refresh(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                st = self._stage
                if st is None or st["bar"] is None:
                    continue
                self._draw(st, self._done(st))
                st["bar"].refresh()

    def end(self, finished: bool = True) -> None:
        """End the current stage: its bar is completed, or its plain line printed (an
        unfinished stage's bar is left as it is, and has no line)."""
        with self._lock:
            st, self._stage = self._stage, None
        if st is None:
            return
        if not finished:
            if st["bar"] is not None:
                st["bar"].close()
            return
        done = st["total"] or self._done(st)
        seconds = time.time() - st["t0"]
        what = f"{done} {st['unit']}" if st["total"] else "done"
        tokens = f", {st['tokens'] / 1e6:.1f}M tokens" if st["tokens"] else ""
        line = f"[{st['name']}] {what}{tokens} in {seconds:.1f} s{self._rate(st, done)}"
        if st["bar"] is not None:
            self._draw(st, done)
            st["bar"].close()
        LOG.log(logging.DEBUG if st["bar"] is not None else logging.INFO, line)


PROGRESS = Progress()
