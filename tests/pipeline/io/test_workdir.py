"""Work-file helpers: reading into reused buffers, removing consumed files in the background."""

import os

import numpy as np
import pytest

from fgram.pipeline.io.publish import here
from fgram.pipeline.io.workdir import Sweeper, intact, object_record, read_into, save_array
from fgram.pipeline.kernels.scratch import Scratch


def test_read_into_reuses_the_buffer(tmp_path):
    scratch = Scratch()
    big, small = np.arange(1000, dtype=np.int32), np.arange(7, 0, -1, dtype=np.int32)
    save_array(here(str(tmp_path / "big.npy")), big)
    save_array(here(str(tmp_path / "small.npy")), small)
    a = read_into(here(str(tmp_path / "big.npy")), scratch, "pos")
    assert np.array_equal(a, big) and a.dtype == np.int32
    b = read_into(here(str(tmp_path / "small.npy")), scratch, "pos")
    assert np.array_equal(b, small)
    assert b.__array_interface__["data"][0] == a.__array_interface__["data"][0]  # same pages
    c = read_into(here(str(tmp_path / "big.npy")), scratch, "other")  # another name: its own buffer
    assert np.array_equal(c, big) and np.array_equal(b, small)


def test_read_into_refuses_a_truncated_file(tmp_path):
    path = here(str(tmp_path / "t.npy"))
    save_array(path, np.arange(100, dtype=np.uint64))
    with open(path.path, "r+b") as f:
        f.truncate(os.path.getsize(path.path) - 8)
    with pytest.raises(ValueError, match="truncated"):
        read_into(path, Scratch(), "x")


@pytest.mark.slow
def test_sweeper_removes_in_the_background_and_tolerates_missing_files(tmp_path):
    paths = [here(str(tmp_path / f"f{i}")) for i in range(5)]
    for p in paths:
        open(p.path, "w").close()
    sweeper = Sweeper()
    sweeper.sweep(paths[:3] + [here(str(tmp_path / "never-there"))])
    sweeper.sweep(paths[3:])  # waits for the first batch, then starts the next
    sweeper.wait()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("damage", ["swapped", "moved", "flipped"])
def test_a_saved_array_s_record_catches_a_swap_and_a_compensated_change(tmp_path, damage):
    """A work file's record is an XXH3 of its bytes: two 64-bit words swapped, or +1000 on
    one and -1000 on another (the same sum of words), are found like a flipped bit."""
    path = here(str(tmp_path / "a.npy"))
    arr = np.arange(1, 1001, dtype=np.uint32) * 7
    record = save_array(path, arr)
    assert intact(path, record)
    changed = np.load(path.path)
    words = changed.view(np.uint64)
    if damage == "swapped":
        words[[3, 400]] = words[[400, 3]]
    elif damage == "moved":
        words[3] += np.uint64(1000)
        words[400] -= np.uint64(1000)
    else:
        changed[10] ^= 1
    assert int(words.sum(dtype=np.uint64)) == int(arr.view(np.uint64).sum(dtype=np.uint64)) or (
        damage == "flipped"
    )
    np.save(path.path, changed)
    assert not intact(path, record)
    assert not intact(path, {"bytes": record["bytes"], "sum": 0})  # an older record: again


def test_store_object_names_carry_their_hash_and_older_names_read_as_written():
    new = object_record("0a1b.4000.x00000000000000ff.npy")
    old = object_record("0a1b.4000.00000000000000ff.npy")
    assert new == {"bytes": 4000, "xxh3": 255} and old == {"bytes": 4000, "sum": 255}
    assert object_record("notes.npy") is None


def test_markers_say_which_units_are_done_and_what_they_recorded(tmp_path):
    from fgram.pipeline.io.markers import Markers
    from fgram.pipeline.io.storage import locate

    for folder in (here(str(tmp_path / "a")), locate(str(tmp_path / "b"))):
        markers = Markers(folder, "count")
        assert markers.count(3) == 0 and not markers.done(1)
        markers.mark(1, {"tokens": 7})
        markers.mark(2, {"tokens": 9}, durable=False)
        assert [markers.done(u) for u in range(3)] == [False, True, True]
        assert markers.read(2) == {"tokens": 9} and markers.count(3) == 2
        markers.clear(1)
        assert markers.count(3) == 1 and not markers.done(1)
    assert sorted(os.listdir(tmp_path / "a" / "count")) == ["00000002.done.json"]
