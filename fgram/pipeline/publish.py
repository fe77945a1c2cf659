"""Atomic publishing: build aside, then rename into place; `_SUCCESS` last."""
from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
import uuid

from .errors import LockedError, OutputError


def check_output(out: str, overwrite: bool) -> str:
    out = os.path.abspath(out)
    if os.path.exists(out) and not overwrite:
        raise OutputError(f"{out}: output exists; pass --overwrite to replace it")
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: exists and is not a directory")
    parent = os.path.dirname(out)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{parent}: cannot create output folder ({exc.strerror})") from None
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{parent}: not writable")
    return out


def _beside(out: str, what: str) -> str:
    """A hidden sibling of ``out``: ``.<name>.fgram-<what>``."""
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}.fgram-{what}")


def staging_path(out: str) -> str:
    """The one staging folder of an output: a crashed run's work stays there for --resume."""
    return _beside(out, "staging")


def lock_path(out: str) -> str:
    return _beside(out, "lock")


class OutputLock:
    """One writer per output: a lock file beside it, created exclusively.

    It holds the owner's host and pid; a heartbeat thread touches it every
    ``beat`` seconds. A lock is stale (and taken over) when its owner's
    process is gone (same host) or its heartbeat is older than ``stale``
    seconds (another host: a crashed or unreachable run), so a killed run
    never blocks the output for good.
    """

    def __init__(self, out: str, beat: float = 10.0, stale: float = 120.0):
        self.path = lock_path(out)
        self.out = os.path.abspath(out)
        self.beat, self.stale = beat, stale
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and not self._is_stale(holder):
                    raise LockedError(
                        f"{self.out}: another fgram run is writing it (pid {holder.get('pid')} on "
                        f"{holder.get('host')}, lock {self.path}); if that run is gone, delete the lock"
                    ) from None
                self._remove_stale()
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self._thread = threading.Thread(target=self._heartbeat, daemon=True)
            self._thread.start()
            return self
        raise LockedError(f"{self.out}: could not take the lock {self.path}")

    def __exit__(self, *exc):
        self._stop.set()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        return False

    def _holder(self) -> dict | None:
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None     # half-written or just removed: judged by its age below

    def _is_stale(self, holder: dict) -> bool:
        try:
            age = time.time() - os.path.getmtime(self.path)
        except FileNotFoundError:
            return True
        if holder.get("host") == socket.gethostname():
            return not process_alive(int(holder.get("pid", -1)))
        return age > self.stale

    def _remove_stale(self) -> None:
        stale = f"{self.path}.stale-{uuid.uuid4().hex[:8]}"
        try:            # rename first: of two runs taking over, only one wins
            os.rename(self.path, stale)
            os.remove(stale)
        except FileNotFoundError:
            pass

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.beat):
            try:
                os.utime(self.path)
            except OSError:
                pass


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


def staging_dir(out: str) -> str:
    path = _beside(out, f"staging-{uuid.uuid4().hex[:12]}")
    os.makedirs(path)
    return path


def publish(staging: str, out: str) -> None:
    """Move a finished staging folder to `out`, replacing an older output atomically.

    The caller writes `_SUCCESS` into staging before this; readers that see
    `out` see either the old complete output or the new complete one.
    """
    out = os.path.abspath(out)
    if os.path.exists(out):
        old = _beside(out, f"old-{uuid.uuid4().hex[:12]}")
        os.rename(out, old)
        os.rename(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, out)


def finish(staging: str, out: str, manifest: dict) -> None:
    """Write the manifest, then `_SUCCESS`, then publish staging as `out`."""
    from .workdir import save_json

    save_json(os.path.join(staging, "manifest.json"), manifest)
    with open(os.path.join(staging, "_SUCCESS"), "w"):
        pass
    publish(staging, out)


def discard(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
