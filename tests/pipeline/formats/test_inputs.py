"""Inputs as the file system holds them: links followed once, a file counted once
whatever the names it is reached by, and a loop of links no hang."""

import os

import numpy as np
from helpers import write_bin
from oracle import select

import fgram
from fgram.pipeline.formats.inputs import discover


def _corpus(tmp_path):
    """ds/a.bin, ds/v3/b.bin, and the links a real layout has: ds/latest -> v3, a link
    back up (ds/v3/up -> ..), a hard link and a symbolic one to a.bin."""
    ds = tmp_path / "ds"
    (ds / "v3").mkdir(parents=True)
    a = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]]
    b = [[5, 6, 5, 6, 5, 6, 1, 2]]
    write_bin(str(ds / "a.bin"), a, sep=0)
    write_bin(str(ds / "v3" / "b.bin"), b, sep=0)
    os.symlink("v3", ds / "latest")
    os.symlink("..", ds / "v3" / "up")
    os.link(ds / "a.bin", ds / "a-hard.bin")
    os.symlink("a.bin", ds / "a-soft.bin")
    return ds, a + b


def test_a_folder_with_links_is_read_once(tmp_path, capfd):
    ds, docs = _corpus(tmp_path)
    files = [os.path.relpath(uri, ds) for _, _, uri in discover([str(ds)])]
    assert files == ["a-hard.bin", "latest/b.bin"]  # the first name of each, in name order
    err = capfd.readouterr().err
    assert "the same file as" in err and "a link to a folder read already" in err
    fgram.build(tmp_path / "t", [ds], doc_sep=0, min_count=2, max_len=4, engine="local")
    rows = [
        (tuple(r["tokens"]), r["count"])
        for r in fgram.show(tmp_path / "t", top=10**6)["top_fgrams"]
    ]
    assert rows == select(docs, 4, 2, None)


def test_the_same_file_given_twice_is_read_once(tmp_path, capfd):
    ds, _ = _corpus(tmp_path)
    names = [str(ds / "a.bin"), str(ds / "a-soft.bin"), str(tmp_path / "ds" / "." / "a.bin")]
    assert [uri for _, _, uri in discover(names)] == [names[0]]
    assert f"{names[1]}: the same file as {names[0]}; read once" in capfd.readouterr().err


def test_a_loop_of_links_ends(tmp_path):
    loop = tmp_path / "loop"
    (loop / "x").mkdir(parents=True)
    np.asarray([1, 2, 3], np.uint16).tofile(loop / "x" / "a.bin")
    os.symlink("../..", loop / "x" / "back")
    os.symlink(str(loop), loop / "x" / "again")
    assert [os.path.basename(u) for _, _, u in discover([str(loop)])] == ["a.bin"]
    # a recursive pattern too (Python's recursive glob follows the loop forever)
    assert [os.path.relpath(u, loop) for _, _, u in discover([str(loop / "**" / "*.bin")])] == [
        "x/a.bin"
    ]


def test_patterns_match_as_glob_does(tmp_path):
    import glob

    for f in ("x.bin", "a/y.bin", "a/b/z.bin", "a/b/z.parquet", "a/[x].bin"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_bytes(b"\0\0")
    for pat in ("**/*.bin", "**", "a/**/z.*", "*/y.bin", "a/[xy].bin", "**/b/*", "a/*/*"):
        pattern = str(tmp_path / pat)
        want = sorted(m for m in glob.glob(pattern, recursive=True) if os.path.isfile(m))
        assert [u for _, _, u in discover([pattern])] == want, pat
