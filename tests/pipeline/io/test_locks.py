"""One writer per local output: two runs that start together on a stale lock (as kill -9
leaves it) never both hold it, in 100 of 100 trials; a killed holder's lock is taken
over; `fgram clean` sees a live holder by the same protocol."""

import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from fgram.pipeline.errors import LockedError
from fgram.pipeline.io.locks import FileLock
from fgram.pipeline.io.publish import here, lock_path


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _stale(out: str) -> None:
    with open(lock_path(here(out)), "w") as f:
        json.dump({"host": socket.gethostname(), "pid": _dead_pid(), "started": 0}, f)


def _contender(out, barrier, spans, i):
    """Take the lock at the barrier; hold it 50 ms; record when (or -1: refused)."""
    barrier.wait()
    try:
        with FileLock(out):
            t0 = time.monotonic()
            time.sleep(0.05)
            spans[2 * i], spans[2 * i + 1] = t0, time.monotonic()
    except LockedError:
        spans[2 * i] = spans[2 * i + 1] = -1.0


@pytest.mark.slow
def test_two_runs_taking_over_a_stale_lock_never_both_hold_it(tmp_path):
    ctx = mp.get_context("fork")
    held_once = 0
    for trial in range(100):
        out = str(tmp_path / f"o{trial}")
        _stale(out)
        barrier = ctx.Barrier(2)
        spans = ctx.Array("d", 4)
        procs = [ctx.Process(target=_contender, args=(out, barrier, spans, i)) for i in (0, 1)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(20)
            assert p.exitcode == 0
        (a0, a1), (b0, b1) = spans[0:2], spans[2:4]
        holders = [s for s in ((a0, a1), (b0, b1)) if s[0] >= 0]
        assert holders, f"trial {trial}: nobody took the stale lock"
        if len(holders) == 2:  # both held it: one after the other, never at once
            (x0, x1), (y0, y1) = sorted(holders)
            assert x1 <= y0, f"trial {trial}: two writers at once"
        else:
            held_once += 1
        assert not os.path.exists(lock_path(here(out)))
    assert held_once > 0  # the race was run: most trials refuse the second run


def test_a_killed_holders_lock_is_taken_and_a_live_one_is_not(tmp_path):
    out = str(tmp_path / "o")
    code = (
        "import sys, time; from fgram.pipeline.io.locks import FileLock\n"
        f"with FileLock({out!r}):\n    print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LockedError, match=f"pid {holder.pid} on"):
        FileLock(out).__enter__()
    assert FileLock(out).held()["pid"] == holder.pid  # what `fgram clean` asks
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert os.path.exists(lock_path(here(out)))  # kill -9 leaves the file, not the flock
    assert FileLock(out).held() is None
    with FileLock(out):
        assert json.load(open(lock_path(here(out))))["pid"] == os.getpid()
    assert not os.path.exists(lock_path(here(out)))


def test_an_empty_or_torn_lock_file_is_taken(tmp_path):
    for content in ("", "{half"):
        out = str(tmp_path / "o")
        with open(lock_path(here(out)), "w") as f:
            f.write(content)
        with FileLock(out):
            pass
        assert not os.path.exists(lock_path(here(out)))


@pytest.mark.parametrize("job", ["build", "build from text", "tokenize", "annotate"])
def test_an_output_published_while_a_job_waited_is_not_replaced(tmp_path, monkeypatch, job):
    """Another run publishes the output between a job's first look at it and its lock
    (for a build from text, before any token): under the lock the job looks again and
    stops, the other output untouched and nothing written beside it."""
    import fgram
    import fgram.pipeline.io.locks as locks
    from fgram.pipeline.errors import OutputError
    from fgram.pipeline.formats.synth import generate

    text = job in ("build from text", "tokenize")
    src = tmp_path / "corpus"
    generate(str(src), 3000, vocab=200, fmt="text" if text else "bin", files=1)
    if job == "annotate":  # its table, made before the race
        fgram.build(tmp_path / "table", [src], engine="local", min_count=2, doc_sep=0)
        fgram.index(tmp_path / "table")
    out = tmp_path / "t"
    real = locks.OutputLock

    class PublishedMeanwhile:
        def __init__(self, where):
            self.lock = real(where)

        def __enter__(self):
            out.mkdir()
            (out / "manifest.json").write_text('{"kind": "fgram-table"}')
            (out / "_SUCCESS").write_text("")
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    monkeypatch.setattr(locks, "OutputLock", PublishedMeanwhile)
    tok = str(src / "tokenizer.json")
    runs = {
        "build": lambda: fgram.build(out, [src], engine="local", min_count=2, doc_sep=0),
        "build from text": lambda: fgram.build(
            out, [src], engine="local", min_count=2, tokenizer=tok
        ),
        "tokenize": lambda: fgram.tokenize([src], out, tok, format="bin", engine="local"),
        "annotate": lambda: fgram.annotate(
            tmp_path / "table", [src], out, engine="local", doc_sep=0
        ),
    }
    with pytest.raises(OutputError, match="output exists; pass --overwrite"):
        runs[job]()
    assert sorted(os.listdir(out)) == ["_SUCCESS", "manifest.json"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".t")]  # nothing beside it
