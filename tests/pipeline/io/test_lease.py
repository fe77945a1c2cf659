"""One writer per output on an object store (a real SeaweedFS, tests/support/s3server.py): the
lease taken with conditional writes (``If-None-Match``, ``If-Match``) where the store has
them, the claim protocol where it does not, both judged by the store's clock, and a run
whose lease was taken over publishes nothing."""

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from s3server import objects

from fgram.pipeline.errors import LockedError
from fgram.pipeline.io import lease as lease_module
from fgram.pipeline.io.conditional import conditional_writes
from fgram.pipeline.io.lease import LEASE, LeaseLock
from fgram.pipeline.io.publish import commit_generation
from fgram.pipeline.io.storage import locate

PROTOCOLS = ["conditional", "claims"]


@pytest.fixture(params=PROTOCOLS)
def protocol(request, monkeypatch):
    """Each test under both protocols: the claims one as a run without conditional writes
    (botocore absent, another store) takes it."""
    if request.param == "claims":
        monkeypatch.setattr(lease_module, "conditional_writes", lambda loc: None)
    return request.param


def test_seaweedfs_has_conditional_writes_and_the_lease_uses_them(s3):
    bucket = s3.bucket()
    out = locate(f"s3://{bucket}/t")
    cond = conditional_writes(out)
    assert cond is not None
    probe = out.child("x")
    assert cond.create(probe, b"a") is not None and cond.create(probe, b"b") is None
    assert probe.read_bytes() == b"a"
    first = cond.version(probe)
    assert cond.replace(probe, b"c", first.etag) is not None
    assert cond.replace(probe, b"d", first.etag) is None  # no longer that version
    assert probe.read_bytes() == b"c"
    with LeaseLock(out) as lock:
        assert objects(s3.filesystem(), f"{bucket}/.t.fgram-lock") == [LEASE]
        assert lock.folder.child(LEASE).read_json()["pid"] == lock.me["pid"]
    assert objects(s3.filesystem(), f"{bucket}/.t.fgram-lock") == []


def test_without_botocore_the_lease_is_a_claim(s3, monkeypatch):
    monkeypatch.setitem(sys.modules, "botocore", None)
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    bucket = s3.bucket()
    out = locate(f"s3://{bucket}/t")
    assert conditional_writes(out) is None
    with LeaseLock(out) as lock:
        assert objects(s3.filesystem(), f"{bucket}/.t.fgram-lock") == [lock.claim.name]


@pytest.mark.slow
def test_lease_contenders_never_both_hold(s3, monkeypatch):
    """Three runs started together through a barrier, 100 rounds: never two holders at
    once, and every run either held the lease or was refused. Odd rounds are mixed: one
    run has no conditional writes (it claims), the others take the lease object."""
    monkeypatch.setattr(LeaseLock, "RETRY_WAIT", (0.01, 0.05))
    monkeypatch.setattr(LeaseLock, "ATTEMPTS", 2)  # a loser gives up at once: rounds are quick
    real = lease_module.conditional_writes
    plain = threading.local()
    monkeypatch.setattr(
        lease_module, "conditional_writes", lambda loc: None if plain.__dict__ else real(loc)
    )
    bucket = s3.bucket()

    def one_round(r):
        out = locate(f"s3://{bucket}/contended-{r}")
        holders, errors, gate = [], [], threading.Barrier(3)

        def contend(i):
            if r % 2 and i == 1:
                plain.on = True
            gate.wait()
            try:
                with LeaseLock(out):
                    holders.append(1)
                    time.sleep(0.02)
                    holders.append(-1)
            except LockedError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=contend, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        running = np.cumsum(holders) if holders else np.zeros(1)
        assert running.max() <= 1, f"round {r}: two runs held the lease at once"
        assert len(holders) // 2 + len(errors) == 3

    for r in range(100):
        one_round(r)


def test_lease_of_a_dead_run_is_taken_over(s3, protocol):
    bucket = s3.bucket()
    out = locate(f"s3://{bucket}/t")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = LEASE if protocol == "conditional" else "old-claim.json"
    left = out.sibling(".t.fgram-lock").child(name)
    left.write_json({"host": socket.gethostname(), "pid": dead.pid, "started": 0})
    with LeaseLock(out) as lock:
        if protocol == "conditional":
            assert left.read_json()["pid"] == lock.me["pid"]  # replaced, in one step
        else:
            assert not left.exists()


@pytest.mark.parametrize("skew", [200.0, -200.0])
def test_a_lease_is_judged_by_the_stores_clock_not_the_hosts(s3, monkeypatch, protocol, skew):
    """Another host's lease, just written: a host whose clock runs 200 s ahead must not
    take it for stale (nor one 200 s behind); one the store wrote 2 s ago, with a stale
    time of 1 s, is stale whatever this host's clock says."""
    bucket = s3.bucket()
    out = locate(f"s3://{bucket}/t")
    name = LEASE if protocol == "conditional" else "other-host-1-abc.json"
    other = out.sibling(".t.fgram-lock").child(name)
    other.write_json({"host": "another-host", "pid": 1, "started": 0})
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)
    with pytest.raises(LockedError, match="another fgram run is writing it"), LeaseLock(out):
        pass
    assert other.read_json()["host"] == "another-host"
    lock = LeaseLock(out, stale=1.0)
    time.sleep(2.5)
    with lock:
        if protocol == "conditional":
            assert other.read_json()["pid"] == lock.me["pid"]
        else:
            assert not other.exists()


def test_a_run_whose_lease_was_taken_over_publishes_nothing(s3, tmp_path, protocol):
    """A holder paused past its lease (no beat): another host takes the lease over; the
    paused run, resumed, is refused at its publish's switch, and its uploaded files are
    removed; what the other run published stays."""
    bucket = s3.bucket()
    out = locate(f"s3://{bucket}/t")
    (tmp_path / "part.bin").write_bytes(b"slow run's data")
    slow = LeaseLock(out, beat=3600, stale=1.0)
    with slow:
        time.sleep(2.5)
        other = LeaseLock(out, stale=1.0)
        other.me["host"] = "another-host"  # judged by the store's clock, not by its pid
        with other:  # its publish (in its own process: this one's leases are both here)
            out.child("manifest.json").write_bytes(b"other")
        with pytest.raises(LockedError, match="lost its lease"):
            commit_generation(
                out, {"part-slow.bin": str(tmp_path / "part.bin")}, [("manifest.json", b"slow")]
            )
        assert slow.lost
    assert objects(s3.filesystem(), f"{bucket}/t") == ["manifest.json"]
    assert out.child("manifest.json").read_bytes() == b"other"
