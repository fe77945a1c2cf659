"""One writer per output: a lock file beside a local output (`FileLock`: its holder's
host and pid, a heartbeat), a lease beside one on an object store (`lease.LeaseLock`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from fgram.pipeline.errors import LockedError
from fgram.pipeline.io.lease import LeaseLock, process_alive
from fgram.pipeline.io.publish import as_location, check_output, here, lock_path
from fgram.pipeline.io.storage import Location

__all__ = ["FileLock", "LeaseLock", "OutputLock", "is_live", "process_alive", "working_in"]


def OutputLock(out: Location, beat: float = 10.0, stale: float = 120.0) -> FileLock | LeaseLock:
    """One writer per output: a lock file beside a local output (`FileLock`), a lease
    object beside one on an object store (`LeaseLock`)."""
    loc = as_location(out)
    return FileLock(loc.path, beat, stale) if loc.local else LeaseLock(loc, beat, stale)


class FileLock:
    """One writer per output: a lock file beside it, held with ``flock`` for the run.

    The file holds the owner's host and pid; a heartbeat thread touches it every
    ``beat`` seconds. Taking it is one atomic step on this machine: an exclusive
    ``flock`` (the kernel lets one process hold it, and drops it when the process dies,
    kill -9 too), then the holder the file names is judged under it: a live process
    here, or another host's heartbeat younger than ``stale`` seconds (a shared mount,
    where flock may not reach that host), still holds the output; a dead or silent one
    is replaced by writing this run's name over it. No check-then-delete: two runs
    taking over one stale lock cannot both win. A file removed while a run waited for
    it (the holder ending) is tried again.
    """

    def __init__(self, out: str, beat: float = 10.0, stale: float = 120.0):
        self.out = os.path.abspath(out)  # a path of this machine
        self.path = lock_path(here(self.out))
        self.beat, self.stale = beat, stale
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        for _ in range(10):
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                taken = self._take(fd, me)
            except BaseException:
                os.close(fd)
                raise
            if not taken:  # the file was removed meanwhile (its holder ended): again
                os.close(fd)
                continue
            self._fd = fd
            thread = self._thread = threading.Thread(target=self._heartbeat, daemon=True)
            thread.start()
            return self
        raise LockedError(f"{self.out}: could not take the lock {self.path}")

    def _take(self, fd: int, me: dict[str, Any]) -> bool:
        """Under ``flock``: whether this run now holds the lock; LockedError when another
        live run does."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise self._locked(self._read(fd)) from None
        try:
            if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                return False
        except FileNotFoundError:
            return False
        holder = self._read(fd)
        if holder and not self._is_stale(holder):
            raise self._locked(holder)
        data = json.dumps(me).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return True

    def _locked(self, holder: dict[str, Any] | None) -> LockedError:
        who = (
            f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "a run taking it now"
        )
        return LockedError(
            f"{self.out}: another fgram run is writing it ({who}, lock {self.path}); if "
            f"that run is gone, delete the lock"
        )

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)  # still held: a run that opened it meanwhile tries again
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def held(self) -> dict[str, Any] | None:
        """The live run holding the lock (its host, pid), or None (no lock, or a stale
        one): the test `fgram clean` makes before it removes a run's leftovers."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            holder = self._read(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return holder or {}  # a live process here holds it
            return holder if holder and not self._is_stale(holder) else None
        finally:
            os.close(fd)

    @staticmethod
    def _read(fd: int) -> dict[str, Any] | None:
        try:
            data = os.pread(fd, 65536, 0)
            holder = json.loads(data) if data else None
        except (OSError, ValueError):
            return None  # half-written: judged like an empty one
        return holder if isinstance(holder, dict) else None

    def _is_stale(self, holder: dict[str, Any]) -> bool:
        try:
            age = time.time() - os.path.getmtime(self.path)
        except FileNotFoundError:
            return True
        if holder.get("host") == socket.gethostname():
            return not process_alive(int(holder.get("pid", -1)))
        return age > self.stale

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.beat):
            with contextlib.suppress(OSError):
                os.utime(self.path)


LIVE = "live.lock"  # in a run's local work folder: flocked while the run lasts


@contextlib.contextmanager
def working_in(folder: Location) -> Iterator[None]:
    """A run works in the local ``folder`` (its staging's ``_work``):
    an ``flock`` on ``folder/live.lock`` for as long, dropped by the kernel when the
    process dies (kill -9 too). `fgram clean` asks `is_live` before it lists a staging
    folder, wherever it is (a --work-dir, the cache's ``remote-runs``, a refresh's
    version, an embed's): the same test as the output's lock, not a guess from names.
    A folder on an object store is not marked (clean lists local folders only)."""
    if not folder.local:
        yield
        return
    os.makedirs(folder.path, exist_ok=True)
    fd = os.open(os.path.join(folder.path, LIVE), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        with contextlib.suppress(BlockingIOError):  # held already: this run's own
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def is_live(staging: str) -> bool:
    """Whether a live run works in a local staging folder (a `working_in` mark in it)."""
    for sub in ("_work",):
        try:
            fd = os.open(os.path.join(staging, sub, LIVE), os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return False


@contextlib.contextmanager
def held_output(
    out: Location, overwrite: bool, storage: dict[str, Any] | None = None, resume: bool = False
) -> Iterator[Location]:
    """An output checked (`publish.check_output`: a bad path is one line before anything
    starts), then its lock taken and the output checked again under it, so that one
    another run published while this one waited is never replaced without --overwrite.
    Yields the output's location, the lock held."""
    loc = check_output(out, overwrite, storage, resume)
    with OutputLock(loc):
        yield check_output(loc, overwrite, storage, resume)
