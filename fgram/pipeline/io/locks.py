"""One writer per output: a lock file beside a local output (`FileLock`: its holder's
host and pid, a heartbeat), a lease object beside one on an object store (`LeaseLock`:
claims in a folder, the oldest live claim wins, renewed while the run lasts)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fgram.pipeline.errors import LockedError, StorageUnavailable
from fgram.pipeline.io.publish import as_location, lock_path
from fgram.pipeline.io.storage import Location, Place


def OutputLock(out: Place, beat: float = 10.0, stale: float = 120.0) -> FileLock | LeaseLock:
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
        self.path = lock_path(out)
        self.out = os.path.abspath(out)
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


def process_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (a stale lock's, a killed run's)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseLock:
    """One writer per output on an object store, where there is no exclusive create:
    each run writes a claim object of its own into ``.<name>.fgram-lock/`` beside the
    output, then lists the claims. It holds the lock only if it sees no other live
    claim; otherwise it withdraws its claim and tries again, a few times, then gives
    up (LockedError). Two runs that claim at once may both withdraw, never both hold:
    with strongly consistent listing (S3 and SeaweedFS), of two claims written before
    either listing, the later listing sees both. A holder rewrites its claim every
    ``beat`` seconds; a claim is stale (deleted by the next run) when its run is gone
    (same host) or it was last written more than ``stale`` seconds ago by the store's
    clock: its object's time against that of the claim just written (hosts' clocks
    may disagree by minutes; the store's times are one clock).

    Released at the end in a bounded wait (`RELEASE_WAIT`): a store that froze is not
    waited for; the claim then expires by itself."""

    ATTEMPTS = 5
    RELEASE_WAIT = 5.0

    def __init__(self, out: Location, beat: float = 10.0, stale: float = 120.0):
        self.out = out
        self.folder = out.sibling(f".{out.name}.fgram-lock")
        self.me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.time(),
            "output": out.uri,
        }
        self.claim = self.folder.child(
            f"{self.me['host']}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
        )
        self.beat, self.stale = beat, stale
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseLock:
        import random

        seen = None
        for attempt in range(self.ATTEMPTS):
            self.claim.write_json(self.me)
            now = self.claim.info().mtime  # the store's clock, as it wrote our claim
            live = [n for n in self.folder.names() if n != self.claim.name and self._live(n, now)]
            if not live:
                thread = self._thread = threading.Thread(target=self._heartbeat, daemon=True)
                thread.start()
                return self
            self.claim.remove()
            holder = self._read(live[0]) or {}
            if live[0] == seen or attempt == self.ATTEMPTS - 1:
                raise LockedError(
                    f"{self.out.uri}: another fgram run is writing it (pid {holder.get('pid')} "
                    f"on {holder.get('host')}, lease {self.folder.child(live[0]).uri}); if that "
                    f"run is gone, the lease expires {int(self.stale)} s after its last beat"
                )
            seen = live[0]
            time.sleep(random.uniform(0.2, 1.0))
        raise LockedError(f"{self.out.uri}: could not take the lease {self.folder.uri}")

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = self.folder.child(name).read_json()
            return lease
        except Exception:  # noqa: BLE001 - gone meanwhile
            return None

    def _live(self, name: str, now: Any) -> bool:
        """Whether another run's claim still counts (``now``: the store's time of our own
        claim); stale ones are deleted."""
        other = self.folder.child(name)
        info, holder = other.info(), self._read(name)
        if holder is None or info.mtime is None:
            return False
        if holder.get("host") == self.me["host"]:
            alive = process_alive(int(holder.get("pid", -1)))
        else:
            ref = now.timestamp() if now is not None else time.time()
            alive = ref - info.mtime.timestamp() <= self.stale
        if not alive:
            other.remove()
        return alive

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.beat):
            with contextlib.suppress(Exception):  # noqa: BLE001 - the next beat tries again
                self.claim.write_json({**self.me, "beat": time.time()})

    def __exit__(self, kind: Any, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)  # a beat hung on a frozen store is left behind
        if kind is not None and issubclass(kind, StorageUnavailable):
            return  # the store does not answer: the claim expires by itself
        done = threading.Event()

        def release() -> None:
            with contextlib.suppress(Exception):  # noqa: BLE001 - it expires by itself
                self.claim.remove()
            done.set()

        threading.Thread(target=release, daemon=True).start()
        done.wait(self.RELEASE_WAIT)


LIVE = "live.lock"  # in a run's local work folder: flocked while the run lasts


@contextlib.contextmanager
def working_in(folder: Place) -> Iterator[None]:
    """A run works in the local ``folder`` (its staging's ``_work``):
    an ``flock`` on ``folder/live.lock`` for as long, dropped by the kernel when the
    process dies (kill -9 too). `fgram clean` asks `is_live` before it lists a staging
    folder, wherever it is (a --work-dir, the cache's ``remote-runs``, a refresh's
    version, an embed's): the same test as the output's lock, not a guess from names.
    A folder on an object store is not marked (clean lists local folders only)."""
    if isinstance(folder, Location):
        if not folder.local:
            yield
            return
        folder = folder.path
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, LIVE), os.O_CREAT | os.O_RDWR, 0o644)
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
