"""A full disk: one line naming the file and the space left, exit status 2, nothing
published and nothing left behind (a small tmpfs this test mounts; root only)."""

import os
import subprocess
import sys

import pytest

from fgram.pipeline.formats.synth import generate


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "small"
    where.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, small_disk):
    src = tmp_path / "corpus"
    generate(str(src), 3_000_000, vocab=20_000, fmt="bin", files=1)
    out = small_disk / "t"
    res = subprocess.run(
        [sys.executable, "-m", "fgram", "build", str(out), str(src), "--doc-sep", "0",
         "--engine", "local", "--unit-tokens", "500K"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [line for line in res.stderr.splitlines() if line.startswith("fgram: error")]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and "no space left on the device" in lines[0], res.stderr
    assert str(small_disk) in lines[0] and "bytes free" in lines[0]
    assert "Traceback" not in res.stderr
    assert os.listdir(small_disk) == []  # nothing published, no staging, no .tmp
