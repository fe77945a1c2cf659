"""`fgram clean` never lists what a live run works in, wherever its staging is (a
--work-dir, a refresh's new version, an embed's rows); what a dead run left, it lists.
The run is caught in the middle by a hook at its passes (or chunks), where `fgram clean`
runs as a process of its own; the run then dies (an exception: its marks go as a killed
process's do)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, write_bin

import fgram
from fgram.pipeline.io import clean

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")


def _listed(folder) -> list[str]:
    """What `fgram clean FOLDER` lists (a process of its own, as a user runs it)."""
    res = subprocess.run([FGRAM, "clean", str(folder)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.splitlines() if str(folder) in line]


def _corpus(tmp_path):
    rng = np.random.default_rng(0)
    docs = [list(rng.integers(1, 30, 50)) for _ in range(40)]
    return write_bin(str(tmp_path / "c.bin"), docs, sep=0)


def _hook(monkeypatch, cls, name, seen, folder):
    """``cls.name`` runs `fgram clean FOLDER` first, then fails (the run dies there)."""
    real = getattr(cls, name)

    def hooked(*args, **kwargs):
        seen.append(_listed(folder))
        raise RuntimeError("killed")

    monkeypatch.setattr(cls, name, hooked)
    return real


def test_a_work_dir_build_is_not_listed_while_it_runs(tmp_path, monkeypatch):
    import fgram.jobs.table.driver as driver

    src, work = _corpus(tmp_path), str(tmp_path / "work")
    seen: list[list[str]] = []
    _hook(monkeypatch, driver.BuildPasses, "done", seen, work)
    with pytest.raises(RuntimeError, match="killed"):
        build(None, [src], tmp_path / "t", doc_sep=0, min_count=2, engine="local", work_dir=work)
    assert seen == [[]]  # live: not listed
    dead = _listed(work)
    assert len(dead) == 1 and ".fgram-staging" in dead[0] and "--resume" in dead[0]


def test_a_refresh_in_progress_is_not_listed(tmp_path, monkeypatch):
    import fgram.jobs.refresh.driver as driver

    src, root = _corpus(tmp_path), tmp_path / "root"
    fgram.refresh(root, [src], doc_sep=0, min_count=2, engine="local")
    seen: list[list[str]] = []
    _hook(monkeypatch, driver.RefreshPasses, "done", seen, root)
    with pytest.raises(RuntimeError, match="killed"):
        fgram.refresh(root, [src], doc_sep=0, min_count=3, engine="local", rebuild=True)
    assert seen == [[]]


@pytest.mark.parametrize("at", ["_first_row", "EmbedStage.run"])
def test_an_embed_in_progress_is_not_listed_and_a_dead_one_is(tmp_path, monkeypatch, at):
    """From its first seconds (the first row, which sizes the staging matrix: before it
    works in its folder) to its chunks: the embed holds its lock."""
    import fgram.jobs.embed as embed

    src, table = _corpus(tmp_path), tmp_path / "t"
    build(None, [src], table, doc_sep=0, min_count=2, engine="local")
    seen: list[list[str]] = []
    owner, _, name = at.rpartition(".")
    _hook(monkeypatch, getattr(embed, owner) if owner else embed, name, seen, table)
    with pytest.raises(RuntimeError, match="killed"):
        fgram.embed(table, model="fgram.pipeline.models:echo", engine="local")
    assert seen == [[]]
    dead = _listed(table)
    assert len(dead) == 1 and "embeddings.staging" in dead[0]
    assert [e.path for e in clean.leftovers([str(table)])] == [str(table / "embeddings.staging")]
