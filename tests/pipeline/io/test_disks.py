"""Disks as deployments have them, on a small tmpfs the tests mount (root only; skipped
with the reason elsewhere): a full one is one line naming the file and the space left,
exit status 2, nothing published, the completed work kept for --resume; a work folder
on another filesystem than the output still publishes atomically."""

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


def test_a_full_disk_is_one_line_keeps_the_work_and_resumes_once_there_is_room(
    tmp_path, small_disk
):
    src = tmp_path / "corpus"
    generate(str(src), 3_000_000, vocab=20_000, fmt="bin", files=1)
    out = small_disk / "t"
    cmd = [sys.executable, "-m", "fgram", "build", str(out), str(src), "--doc-sep", "0",
           "--engine", "local", "--unit-tokens", "500K"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [line for line in res.stderr.splitlines() if line.startswith("fgram: error")]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and "no space left on the device" in lines[0], res.stderr
    assert str(small_disk) in lines[0] and "bytes free" in lines[0]
    assert lines[0].endswith("rerun with --resume once there is room")
    assert "Traceback" not in res.stderr
    staging = small_disk / ".t.fgram-staging"
    assert os.listdir(small_disk) == [staging.name]  # nothing published; the work kept
    assert not [f for f in _files(staging) if f.endswith(".tmp")]  # no half-written file
    grown = subprocess.run(
        ["mount", "-o", "remount,size=64m", str(small_disk)], capture_output=True
    )
    assert grown.returncode == 0, grown.stderr
    res = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    import fgram

    fgram.build(tmp_path / "ref", [src], doc_sep=0, engine="local", unit_tokens="500K")
    want = fgram.show(tmp_path / "ref", top=10**6)["top_fgrams"]
    assert fgram.show(out, top=10**6)["top_fgrams"] == want
    assert os.listdir(small_disk) == ["t"]


def _files(root) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]


def test_a_work_folder_on_another_filesystem_publishes(tmp_path, small_disk):
    """--work-dir on another filesystem than the output: the finished table is copied
    beside the output, then renamed into place (one atomic step there); the same table
    as a build without it, and no work left in either place."""
    import fgram

    src = tmp_path / "corpus"
    generate(str(src), 20_000, vocab=300, fmt="bin", files=2)
    opts = {"doc_sep": 0, "engine": "local", "min_count": 2, "max_len": 4}
    fgram.build(tmp_path / "here", [src], **opts)
    fgram.build(tmp_path / "t", [src], work_dir=str(small_disk), **opts)
    want = fgram.show(tmp_path / "here", top=10**6)["top_fgrams"]
    assert fgram.show(tmp_path / "t", top=10**6)["top_fgrams"] == want
    assert os.listdir(small_disk) == []
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == []


def test_every_writer_on_a_full_disk_says_so_and_leaves_the_file_as_it_was(tmp_path, small_disk):
    """Work files, JSON, objects' local copies and table parts are written aside and
    renamed (`failures.aside`): on a full disk each says so in one `NoSpace` naming its
    file, leaves no piece behind, and a file that was there keeps its bytes."""
    import numpy as np

    from fgram.pipeline.errors import NoSpace
    from fgram.pipeline.formats.table import arrow_table, write_table
    from fgram.pipeline.io import workdir as wf
    from fgram.pipeline.io.publish import here

    big = np.arange(1 << 20, dtype=np.int64)  # 8 MiB: more than the disk holds
    source = tmp_path / "big.bin"
    source.write_bytes(big.tobytes())
    ids = np.arange(1 << 19)
    table = arrow_table(ids, np.full(len(ids), 2, np.int8), 2 * np.arange(len(ids) + 1),
                        np.tile(ids, 2).astype(np.int32), ids)  # fmt: skip
    writers = {
        "array.npy": lambda loc: wf.save_array(loc, big),
        "state.json": lambda loc: wf.save_json(loc, {"ids": big[:300_000].tolist()}),
        "object.bin": lambda loc: loc.write_bytes(big.tobytes()),
        "copy.bin": lambda loc: loc.upload(str(source)),
        "got.bin": lambda loc: here(str(source)).download(loc.path),
        "part.parquet": lambda loc: write_table(table, loc),
    }
    for name, write in writers.items():
        where = small_disk / name
        where.write_bytes(b"before")
        with pytest.raises(NoSpace, match=rf"^{where}: no space left on the device"):
            write(here(str(where)))
        assert where.read_bytes() == b"before", name
        assert sorted(os.listdir(small_disk)) == sorted(
            n for n in writers if (small_disk / n).exists()
        ), name  # no .tmp piece left
