"""One writer per output on an object store: a lease in ``.<name>.fgram-lock/`` beside
the output, judged by the store's clock, renewed while the run lasts, and confirmed
before the run publishes (`confirm_held`)."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import sys
import threading
import time
import uuid
from typing import Any

from fgram.pipeline.errors import LockedError, StorageUnavailable
from fgram.pipeline.io.conditional import ConditionalWrites, conditional_writes
from fgram.pipeline.io.storage import Location, json_bytes

LEASE = "lease.json"  # the one lease object, where the store has conditional writes
_HELD: list[LeaseLock] = []  # the leases this process holds now


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
    """One writer per output on an object store.

    Where the store has conditional writes (`conditional.conditional_writes`: S3 and
    SeaweedFS, through botocore), the lease is one object, ``lease.json``: taken by
    creating it only if absent (``If-None-Match: *``), a stale one taken over by
    replacing it only if it is still the version judged stale (``If-Match``), renewed
    the same way, so of any number of runs exactly one holds it, and a holder that was
    paused past the lease learns it lost it (its renewal is refused) and does not publish.

    Elsewhere (another store, botocore absent, a store without them) each run writes a
    claim object of its own into the folder, then lists it, and holds the lock only if it
    sees no other live claim; otherwise it withdraws and tries again, a few times, then
    gives up. Two runs that claim at once may both withdraw, never both hold: with
    strongly consistent listing (S3, SeaweedFS), of two claims written before either
    listing, the later listing sees both. Runs of both kinds see each other: the lease
    object is one more claim to the listing, and the lease's holder lists the claims too.

    Either is stale when its run is gone (same host) or it was last written more than
    ``stale`` seconds ago by the store's clock (hosts' clocks may disagree by minutes;
    the store's times are one clock). Released at the end in a bounded wait
    (`RELEASE_WAIT`): a store that froze is not waited for; the lease then expires."""

    ATTEMPTS = 5
    RETRY_WAIT = (0.2, 1.0)  # seconds between attempts, drawn at random in this range
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
        self.lost = False
        self._cond: ConditionalWrites | None = None
        self._etag: str | None = None  # the lease's version this run wrote last
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewing = threading.Lock()  # the heartbeat's and `confirm`'s, one at a time

    def __enter__(self) -> LeaseLock:
        self._cond = conditional_writes(self.folder)
        seen = None
        for attempt in range(self.ATTEMPTS):
            live = self._take() if self._cond is not None else self._claim()
            if not live:
                thread = self._thread = threading.Thread(target=self._heartbeat, daemon=True)
                thread.start()
                _HELD.append(self)
                return self
            if live == seen or attempt == self.ATTEMPTS - 1:
                raise self._locked(live)
            seen = live
            time.sleep(random.uniform(*self.RETRY_WAIT))
        raise LockedError(f"{self.out.uri}: could not take the lease {self.folder.uri}")

    def _locked(self, name: str) -> LockedError:
        holder = self._read(name) or {}
        return LockedError(
            f"{self.out.uri}: another fgram run is writing it (pid {holder.get('pid')} on "
            f"{holder.get('host')}, lease {self.folder.child(name).uri}); if that run is "
            f"gone, the lease expires {int(self.stale)} s after its last beat"
        )

    def _take(self) -> str | None:
        """The conditional protocol: None when this run now holds ``lease.json``, else
        the name of the live lease or claim in the way."""
        assert self._cond is not None
        lease = self.folder.child(LEASE)
        body = json_bytes({**self.me, "beat": time.time()})
        etag = self._cond.create(lease, body)
        if etag is None:
            version = self._cond.version(lease)
            if version is None:
                return LEASE  # released meanwhile: try again
            holder = self._read(LEASE)
            if holder and self._alive(holder, version.written.timestamp(), version.now.timestamp()):
                return LEASE
            etag = self._cond.replace(lease, body, version.etag)  # only that stale one
            if etag is None:
                return LEASE  # another run took it over first
        self._etag = etag
        mine = self._cond.version(lease)
        live = self._others(mine.now.timestamp() if mine else None, LEASE)
        if live:
            self._release_lease()
        return live

    def _claim(self) -> str | None:
        """The claim protocol: None when this run's claim is the only live one."""
        self.claim.write_json(self.me)
        now = self.claim.info().mtime  # the store's clock, as it wrote our claim
        live = self._others(now.timestamp() if now is not None else None, self.claim.name)
        if live:
            self.claim.remove()
        return live

    def _others(self, now: float | None, mine: str) -> str | None:
        """The first other live claim or lease in the folder (stale claims are deleted)."""
        for name in self.folder.names():
            if name == mine or name.startswith(".fgram-probe-"):
                continue
            other = self.folder.child(name)
            info, holder = other.info(), self._read(name)
            if holder is None or info.mtime is None:
                continue
            if self._alive(holder, info.mtime.timestamp(), now):
                return name
            if name != LEASE:  # a stale lease is replaced conditionally, never deleted
                other.remove()
        return None

    def _alive(self, holder: dict[str, Any], written: float, now: float | None) -> bool:
        """Whether a lease or claim written at ``written`` (the store's time) still
        counts at ``now`` (the store's time of this run's own last write)."""
        if holder.get("host") == self.me["host"]:
            return process_alive(int(holder.get("pid", -1)))
        return (now if now is not None else time.time()) - written <= self.stale

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = self.folder.child(name).read_json()
            return lease
        except Exception:  # noqa: BLE001 - gone meanwhile
            return None

    def _renew(self) -> None:
        with self._renewing:
            self._renew_now()

    def _renew_now(self) -> None:
        if self.lost:
            return
        body = {**self.me, "beat": time.time()}
        if self._cond is not None and self._etag is not None:
            etag = self._cond.replace(self.folder.child(LEASE), json_bytes(body), self._etag)
            if etag is None:
                self._lose()
            self._etag = etag
        elif self._cond is None:
            if not self.claim.exists():
                self._lose()
                return
            self.claim.write_json(body)

    def _lose(self) -> None:
        if not self.lost:
            sys.stderr.write(
                f"fgram: warning: {self.out.uri}: this run's lease {self.folder.uri} was taken "
                f"over (no beat for {int(self.stale)} s); it will not publish\n"
            )
        self.lost = True
        self._stop.set()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.beat):
            with contextlib.suppress(Exception):  # noqa: BLE001 - the next beat tries again
                self._renew()

    def confirm(self) -> None:
        """LockedError unless this run still holds the lease (a last renewal, now)."""
        if not self.lost:
            with contextlib.suppress(StorageUnavailable):
                self._renew()
        if self.lost:
            raise LockedError(
                f"{self.out.uri}: this run lost its lease {self.folder.uri} (no beat for "
                f"{int(self.stale)} s, and another run took it over); nothing was published"
            )

    def _release_lease(self) -> None:
        assert self._cond is not None
        lease = self.folder.child(LEASE)
        version = self._cond.version(lease)
        if version is not None and version.etag == self._etag:
            self._cond.delete(lease)
        self._etag = None

    def __exit__(self, kind: Any, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(ValueError):
            _HELD.remove(self)
        if self._thread is not None:
            self._thread.join(timeout=1)  # a beat hung on a frozen store is left behind
        if self.lost or (kind is not None and issubclass(kind, StorageUnavailable)):
            return  # the store does not answer: the claim expires by itself
        done = threading.Event()

        def release() -> None:
            with contextlib.suppress(Exception):  # noqa: BLE001 - it expires by itself
                if self._cond is not None:
                    self._release_lease()
                else:
                    self.claim.remove()
            done.set()

        threading.Thread(target=release, daemon=True).start()
        done.wait(self.RELEASE_WAIT)


def confirm_held(dest: Location) -> None:
    """Before a publish switches ``dest``: every lease this process holds over it (on
    ``dest`` or a folder above it) is still this run's (LockedError otherwise)."""
    for lease in list(_HELD):
        base = lease.out.uri.rstrip("/")
        if dest.uri == base or dest.uri.startswith(base + "/"):
            lease.confirm()
