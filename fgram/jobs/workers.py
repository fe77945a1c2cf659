"""Worker processes for the local engine, each over a pipe of its own.

`multiprocessing.Pool` shares its queues' locks with its workers; ``terminate`` kills
workers that may be writing a result, holding the result queue's lock, and its task
thread then waits on that lock forever (the local engine stalled for minutes after a
failed task). Here nothing is shared but one pipe per worker: the driver sends a task
to an idle worker, reads results as they come and yields them in task order; on the
first failure, or when a worker dies, every worker is killed at once and nothing can
be left holding a lock.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any


class WorkerDied(RuntimeError):
    """A local worker process ended without answering (killed, out of memory): the run
    fails (exit status 1), its work kept for --resume."""


def serve(conn: Connection, call: Callable[[Any], Any], env: dict[str, str] | None = None) -> None:
    """A worker's loop: each message a task for ``call``, answered (ok, value); None
    ends it. ``env``: the environment to work in (the driver's now: a worker forked by a
    server started earlier has that server's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    while True:
        try:
            item = conn.recv()
        except EOFError:
            return
        if item is None:
            return
        try:
            answer: tuple[bool, Any] = (True, call(item))
        except BaseException as exc:  # noqa: BLE001 - sent back, raised there
            answer = (False, exc)
        try:
            conn.send(answer)
        except Exception as exc:  # noqa: BLE001 - an answer that does not pickle
            conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))


class Workers:
    """``n`` processes of context ``ctx``, each running ``target(conn)`` (`serve` with
    the job's call)."""

    def __init__(self, ctx: Any, n: int, target: Callable[[Connection], None]):
        self.procs, self.conns = [], []
        for _ in range(n):
            here, there = mp.Pipe()
            proc = ctx.Process(target=target, args=(there,), daemon=True)
            proc.start()
            there.close()
            self.procs.append(proc)
            self.conns.append(here)

    def imap(self, items: Iterable[Any], context: Any = None) -> Iterator[Any]:
        """Every item's answer, in the items' order (one task per idle worker); the first
        failure is raised (the caller then `kill`s). With a ``context`` (what every task
        of the job needs, a pickled function), each task is sent as (context, item) to a
        worker's first task of the job and (None, item) to its next ones: the context
        crosses each pipe once, however many items."""
        todo = deque(enumerate(items))
        idle = list(self.conns)
        busy: dict[Connection, int] = {}
        done: dict[int, Any] = {}
        told: set[Connection] = set()
        following = 0
        while todo or busy:
            while idle and todo:
                i, item = todo.popleft()
                conn = idle.pop()
                if context is not None:
                    item = (None if conn in told else context, item)
                    told.add(conn)
                conn.send(item)
                busy[conn] = i
            for ready in wait(list(busy)):
                assert isinstance(ready, Connection)
                conn = ready
                try:
                    ok, value = conn.recv()
                except EOFError:
                    proc = self.procs[self.conns.index(conn)]
                    proc.join(1)
                    raise WorkerDied(
                        f"a local worker (pid {proc.pid}) ended without an answer (exit "
                        f"code {proc.exitcode}; -9: killed, e.g. out of memory)"
                    ) from None
                done[busy.pop(conn)] = value
                idle.append(conn)
                if not ok:
                    raise value
            while following in done:
                yield done.pop(following)
                following += 1

    def close(self) -> None:
        """End the workers after their last task (each told, then joined)."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        self._release()

    def kill(self) -> None:
        """End every worker now, whatever it is doing."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(10)
        self._release()

    def _release(self) -> None:
        for conn in self.conns:
            conn.close()
        self.procs, self.conns = [], []
