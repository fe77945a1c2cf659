"""Progress for a person: stage lines when stderr is not a terminal, a live bar when it is;
driven by task completions (the executors report them), nothing unless enabled."""

import io
import os
import pty
import select
import subprocess
import sys
import time

from fgram.jobs.executors import LocalExecutor
from fgram.jobs.progress import PREFIX, Progress

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")


def test_stage_lines_count_the_tasks_an_executor_finishes(monkeypatch):
    import fgram.jobs.executors as ex

    stream = io.StringIO()
    p = Progress()
    p.stage("ignored", 3)  # not enabled: silent (a log record only)
    p.end()
    p.enable(stream)
    monkeypatch.setattr(ex, "PROGRESS", p)
    p.stage("pass 2/3: count", 4, tokens=4_000_000)
    LocalExecutor(processes=2).map(4, lambda i: i * i, progress=True)
    p.stage("select")  # ends the previous stage
    p.end()
    p.end()  # nothing open: no line
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and all(line.startswith(PREFIX) for line in lines)
    assert lines[0].startswith("fgram: [pass 2/3: count] 4 units, 4.0M tokens in ")
    assert lines[0].endswith("M tokens/s") and lines[1].startswith("fgram: [select] done in ")
    p.stage("interrupted", 2)
    p.end(finished=False)  # an unfinished stage leaves no line
    assert stream.getvalue().splitlines() == lines


def test_a_terminal_gets_a_live_bar(tmp_path):
    subprocess.run(
        [FGRAM, "synth", "-o", str(tmp_path / "c"), "--tokens", "3000000", "--format", "bin"],
        check=True,
        capture_output=True,
    )
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            FGRAM,
            "build",
            str(tmp_path / "o"),
            str(tmp_path / "c"),
            "--dtype",
            "uint16",
            "--doc-sep",
            "0",
            "--engine",
            "local",
            "--unit-tokens",
            "300000",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    seen, deadline = b"", time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                break
            if not data:
                break
            seen += data
        elif proc.poll() is not None:
            break
    proc.wait()
    os.close(master)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    import re

    assert re.search(r"pass 2/5: count: (\d+)/\1 units \|", text), text[-2000:]  # all done
    assert "M tokens/s" in text and "\r" in text
    assert "select:" in text and PREFIX not in text  # a bar, not stage lines


def test_the_library_logs_one_record_per_stage(tmp_path, capsys):
    """Called from Python (no command line, nothing enabled), a build prints nothing and
    emits its stage lines as records of the `fgram` logger."""
    import logging

    from helpers import build, write_bin

    from fgram.logs import LOG, hide

    hide()  # as in a fresh process: no handler of the command line's
    write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3]] * 4, sep=0)
    stages = []

    class Keep(logging.Handler):
        def emit(self, record):
            stages.append(record.getMessage())

    keep, level = Keep(), LOG.level
    LOG.addHandler(keep)
    LOG.setLevel(logging.INFO)
    try:
        build(
            None,
            [tmp_path / "a.bin"],
            tmp_path / "o",
            min_count=2,
            max_len=3,
            doc_sep=0,
            engine="local",
        )
    finally:
        LOG.removeHandler(keep)
        LOG.setLevel(level)
    assert [s.split("]")[0] for s in stages] == [
        "[pass 2/3: count",
        "[pass 2/3: merge, keep",
        "[pass 3/3: count",
        "[pass 3/3: merge, keep",
        "[select",
    ], stages
    assert "fgram: [" not in capsys.readouterr().err
