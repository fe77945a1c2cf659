"""Scheduled refresh: versions side by side, `current` switched atomically, diff, prune."""

import json
import os
import re

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import build, result, write_bin
from oracle import count_ngrams, select, split_flat

import fgram
from fgram.cli import cli
from fgram.pipeline.errors import OutputError
from fgram.pipeline.io.publish import here
from fgram.pipeline.tables import versions as vs
from fgram.pipeline.tables.diff import diff_tables

pytestmark = pytest.mark.spark


@pytest.fixture
def runner(spark):
    return CliRunner()


def _docs(path):
    return split_flat(np.fromfile(path, dtype=np.uint16).tolist(), 0)


def test_refresh_versions_equal_full_builds_and_switch_current(runner, spark, tmp_path):
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2], [4, 4, 4, 4]] * 5, sep=0)
    out = tmp_path / "t"
    opts = ["--dtype", "uint16", "--doc-sep", "0", "--min-count", "3", "-K", "4"]
    r1 = runner.invoke(cli, ["refresh", str(out), a, *opts])
    assert r1.exit_code == 0, r1.output
    v1 = vs.current(str(out))
    assert result(out / "current") == select(_docs(a), 4, 3, None)

    again = runner.invoke(cli, ["refresh", str(out), a, *opts])  # nothing changed
    assert again.exit_code == 0 and "up to date" in again.output
    assert vs.list_versions(str(out)) == [v1]

    r2 = runner.invoke(cli, ["refresh", str(out), a, b, *opts])  # a new shard lands
    assert r2.exit_code == 0, r2.output
    v2 = vs.current(str(out))
    assert v2 != v1 and vs.list_versions(str(out)) == sorted([v1, v2])
    build(spark, [a, b], tmp_path / "full", doc_sep=0, min_count=3, max_len=4)
    assert (
        result(out / "current")
        == result(tmp_path / "full")
        == select(_docs(a) + _docs(b), 4, 3, None)
    )
    assert result(out / "versions" / v1) == select(_docs(a), 4, 3, None)  # old one intact

    rep = diff_tables(str(out / "versions" / v1), str(out))
    old = {g for g, c in count_ngrams(_docs(a), 4).items() if c >= 3}
    new = {g for g, c in count_ngrams(_docs(a) + _docs(b), 4).items() if c >= 3}
    assert rep["added"] == len(new - old) and rep["removed"] == len(old - new)
    assert rep["kept"] == len(old & new) > 0 and rep["added"] > 0

    r3 = runner.invoke(cli, ["refresh", str(out), b, *opts, "--keep", "1"])  # a shard removed
    assert r3.exit_code == 0, r3.output
    assert vs.list_versions(str(out)) == [vs.current(str(out))]  # pruned to one
    assert result(out / "current") == select(_docs(b), 4, 3, None)
    shown = runner.invoke(cli, ["diff", str(tmp_path / "full"), str(out), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["removed"] > 0


def test_a_changed_shard_makes_a_new_version(runner, tmp_path):
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 1, 2, 1, 2]] * 3, sep=0)
    out = tmp_path / "t"
    opts = ["--dtype", "uint16", "--doc-sep", "0", "--min-count", "2"]
    assert runner.invoke(cli, ["refresh", str(out), a, *opts]).exit_code == 0
    st = os.stat(a)
    write_bin(a, [[2, 1, 2, 1, 2, 1]] * 3, sep=0)  # same size, same mtime
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = runner.invoke(cli, ["refresh", str(out), a, *opts])
    assert r.exit_code == 0 and "up to date" not in r.output
    assert len(vs.list_versions(str(out))) == 2


def test_refresh_refuses_a_plain_build_output_and_prune_keeps_current(spark, tmp_path):
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 1, 2, 1, 2]] * 3, sep=0)
    build(spark, [a], tmp_path / "plain", doc_sep=0, min_count=2)
    with pytest.raises(OutputError, match="plain `fgram build` output"):
        vs.check_root(str(tmp_path / "plain"))
    root = str(tmp_path / "r")
    vs.check_root(root)
    for vid in ("20260101T000000Z-a", "20260102T000000Z-b", "20260103T000000Z-c"):
        build(spark, [a], vs.version_path(root, vid).path, doc_sep=0, min_count=2)
    vs.switch_current(root, "20260101T000000Z-a")  # an old one is current
    assert vs.prune(root, 2) == ["20260102T000000Z-b"]
    assert vs.list_versions(root) == ["20260101T000000Z-a", "20260103T000000Z-c"]
    assert os.path.realpath(os.path.join(root, "current")).endswith("20260101T000000Z-a")


def test_version_ids_sort_after_the_newest_one_even_within_a_millisecond(monkeypatch):
    import time

    ids = [vs.new_version_id()]
    for _ in range(200):  # many within one millisecond: each after the one before
        ids.append(vs.new_version_id(after=ids[-1]))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert re.fullmatch(r"\d{8}T\d{9}Z-[0-9a-f]{6}", ids[0])
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.5)  # a clock behind the newest
    assert vs.new_version_id(after="20991231T235959999Z-aaaaaa") > "20991231T235959999Z-ffffff"
    old = "20231114T221320Z-ffffff"  # the older format, to the second, of that second
    assert vs.new_version_id(after=old).startswith("20231114T221321000Z-")
    assert vs.new_version_id(after="20231114T221319Z-000000").startswith("20231114T221320500Z-")


def test_every_command_takes_a_refresh_folder(runner, tmp_path):
    """show, index, coverage, lookup (before and after embed), embed, annotate and
    training_sequences take OUT, a refresh folder, for its current version."""
    from fgram.pipeline.tables.tags import training_sequences

    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    out = str(tmp_path / "t")
    shard = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local"]
    assert runner.invoke(cli, ["refresh", out, a, *shard, "--min-count", "3"]).exit_code == 0
    outputs = []
    for args in (
        ["show", out],
        ["index", out],
        ["coverage", out, a, *shard],
        ["lookup", out, "--tokens", "1 2 3 4"],
        ["embed", out, "--model", "fgram.pipeline.models:echo", "--engine", "local"],
        ["lookup", out, "--tokens", "1,2,3,4"],
        ["annotate", out, a, *shard, "-o", str(tmp_path / "tags")],
    ):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, (args, res.output)
        outputs.append(res.output.splitlines())
    before, after = outputs[3], outputs[5]  # 1 2 3 4 is an f-gram: the last position's
    assert before[-2].split()[-4:] == ["1", "2", "3", "4"] and "no embeddings" in before[-1]
    assert after[-1].split()[4:9] == ["1", "2", "3", "4", "|"]  # ... and its echo row
    assert after[-1].split()[-4:] == ["1", "2", "3", "4"]
    seqs = list(training_sequences(str(tmp_path / "tags"), 4))
    assert seqs and seqs[0][0].tolist() == [1, 2, 3, 1]


def test_a_failed_refresh_leaves_no_store_objects_behind(tmp_path, monkeypatch):
    """A refresh that fails after writing store objects (a full disk, a lost cluster)
    removes them: no version names them, and a retry must not pile up more."""
    import fgram
    import fgram.jobs.refresh.driver as driver
    from fgram.jobs.refresh.store import objects_dir

    rng = np.random.default_rng(3)
    docs = [list(rng.integers(1, 20, 60)) for _ in range(30)]
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    write_bin(str(tmp_path / "b.bin"), docs[::-1], sep=0)
    root = tmp_path / "root"
    kw = dict(doc_sep=0, min_count=2, max_len=4, engine="local")
    fgram.refresh(root, [tmp_path / "a.bin"], **kw)
    before = sorted(os.listdir(objects_dir(here(str(root))).path))

    def fails(self, k, threshold, record):
        raise RuntimeError("failed after writing objects")

    monkeypatch.setattr(driver.RefreshPasses, "done", fails)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="after writing objects"):
            fgram.refresh(root, [tmp_path / "a.bin", tmp_path / "b.bin"], **kw)
        assert sorted(os.listdir(objects_dir(here(str(root))).path)) == before


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_new_version_serves_what_the_current_one_served(tmp_path, spark, engine):
    """current had an index and embeddings: the next version has both before current
    points at it (the embeddings made again with the recorded model and row type, equal
    to an embed of that version), so lookups never meet a version without them."""
    from fgram import FgramStore

    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    out = tmp_path / "t"
    opts = ["--dtype", "uint16", "--doc-sep", "0", "--min-count", "3", "--engine", engine]
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh", str(out), a, *opts]).exit_code == 0
    assert runner.invoke(cli, ["index", str(out)]).exit_code == 0
    model = ["--model", "fgram.pipeline.models:hashed", "--float", "float32", "--engine", "local"]
    assert runner.invoke(cli, ["embed", str(out), *model]).exit_code == 0
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2], [4, 4, 4, 4]] * 5, sep=0)
    res = runner.invoke(cli, ["refresh", str(out), a, b, *opts, "--model", model[1]])
    assert res.exit_code == 0, res.output
    assert "index and embeddings carried" in res.stdout
    v2 = tmp_path / "t" / "versions" / vs.current(str(out))
    meta = json.loads((v2 / "embeddings" / "embeddings.json").read_text())
    assert meta["dtype"] == "float32" and meta["model"] == "fgram.pipeline.models:hashed"
    v1 = tmp_path / "t" / "versions" / meta["reused_from"].rstrip("/").rsplit("/", 1)[1]
    shared = {g for g, _ in result(v1)} & {g for g, _ in result(v2)}
    assert 0 < meta["rows_reused"] == len(shared) < len(result(v2))  # only new rows computed
    fresh = tmp_path / "copy"
    import shutil

    shutil.copytree(v2, fresh, ignore=shutil.ignore_patterns("embeddings", "index"))
    assert runner.invoke(cli, ["index", str(fresh)]).exit_code == 0
    assert runner.invoke(cli, ["embed", str(fresh), *model]).exit_code == 0
    carried = np.load(v2 / "embeddings" / "matrix.npy")
    assert carried.shape[0] == len(result(v2)) and np.array_equal(
        carried, np.load(fresh / "embeddings" / "matrix.npy")
    )
    store = FgramStore.open(str(out))  # through current
    rows, mlen, unmatched = store.embed_sequence([5, 6, 5, 6])
    assert mlen.max() >= 2 and not unmatched.all()  # an f-gram only the new shard has
    fid, _ = store.index.match([5, 6, 5, 6])
    assert np.array_equal(rows[~unmatched], carried[fid[~unmatched]])


def test_refresh_runs_no_model_that_a_data_file_names(tmp_path):
    """The current version's embeddings.json names a module (anyone who can write the
    table can change it): a refresh never imports it. Without --model it refuses before
    counting, naming the file; with --model it embeds the new version with that model."""
    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2], [4, 4, 4, 4]] * 5, sep=0)
    out = str(tmp_path / "t")
    opts = ["--dtype", "uint16", "--doc-sep", "0", "--min-count", "3", "--engine", "local"]
    runner = CliRunner()
    assert runner.invoke(cli, ["refresh", out, a, *opts]).exit_code == 0
    hashed = "fgram.pipeline.models:hashed"
    assert runner.invoke(cli, ["index", out]).exit_code == 0
    assert runner.invoke(cli, ["embed", out, "--model", hashed]).exit_code == 0
    meta_path = tmp_path / "t" / "versions" / vs.current(out) / "embeddings" / "embeddings.json"
    meta = json.loads(meta_path.read_text())
    meta["model"] = "a_module_planted_in_a_data_file:run"  # never to be imported
    meta_path.write_text(json.dumps(meta))
    versions = sorted(os.listdir(tmp_path / "t" / "versions"))
    res = runner.invoke(cli, ["refresh", out, a, b, *opts])
    assert res.exit_code == 2 and "give the model that embeds the new version" in res.output
    assert str(meta_path) in res.output and "No module named" not in res.output
    assert sorted(os.listdir(tmp_path / "t" / "versions")) == versions  # nothing counted
    res = runner.invoke(cli, ["refresh", out, a, b, *opts, "--model", hashed])
    assert res.exit_code == 0 and "embeddings carried" in res.output, res.output
    new = tmp_path / "t" / "versions" / vs.current(out) / "embeddings" / "embeddings.json"
    assert json.loads(new.read_text())["model"] == hashed


def test_refresh_deletes_nothing_outside_its_folder(tmp_path):
    """store/objects made a link to another folder: the refresh refuses before writing,
    naming it, and every file there stays; a file in the objects folder that is no store
    object (not a name a refresh writes) is never collected either."""
    import shutil

    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2], [4, 4, 4, 4]] * 5, sep=0)
    root = tmp_path / "t"
    opts = dict(dtype="uint16", doc_sep=0, min_count=3, engine="local")
    fgram.refresh(root, [a], **opts)
    objects = root / "store" / "objects"
    (objects / "notes.txt").write_text("mine")
    fgram.refresh(root, [a, b], keep=1, **opts)
    assert (objects / "notes.txt").read_text() == "mine"  # not a store object: kept
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(objects), str(elsewhere))
    os.symlink(elsewhere, objects)
    (elsewhere / "precious.txt").write_text("keep me")
    before = sorted(os.listdir(elsewhere))
    with pytest.raises(OutputError, match="store/objects: a link .* must be a folder of its own"):
        fgram.refresh(root, [b], keep=1, **opts)
    assert sorted(os.listdir(elsewhere)) == before


def test_a_refresh_folder_remembers_its_options(tmp_path):
    """A later run without -S/--min-count takes the current version's (no store started
    afresh, no version pruned); one giving another value is refused unless --rebuild,
    and a run that rebuilt for its options prunes nothing."""
    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4
    a = write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = str(tmp_path / "t")
    flat = ["--dtype", "uint16", "--doc-sep", "0", "--engine", "local"]
    runner = CliRunner()
    first = runner.invoke(cli, ["refresh", out, a, *flat, "-S", "5", "--min-count", "3"])
    assert first.exit_code == 0, first.output
    v1 = vs.current(out)
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2]] * 5, sep=0)
    second = runner.invoke(cli, ["refresh", out, a, b, *flat, "--keep", "1"])  # no -S
    assert second.exit_code == 0, second.output
    m = json.load(open(os.path.join(out, "current", "manifest.json")))
    assert m["config"]["size"] == 5 and m["config"]["min_count"] == 3
    assert m["refresh"]["store_reused"] is True
    assert result(os.path.join(out, "current")) == select(docs + [[5, 6, 5, 6, 1, 2]] * 5, 5, 3, 5)
    v2 = vs.current(out)
    assert vs.list_versions(out) == [v2]  # --keep 1: v1 pruned by a run of the same options

    refused = runner.invoke(cli, ["refresh", out, a, b, *flat, "-S", "3"])
    assert refused.exit_code == 2
    assert "-S/--size 5 -> 3" in refused.output and "--rebuild" in refused.output
    assert vs.current(out) == v2
    rebuilt = runner.invoke(cli, ["refresh", out, a, b, *flat, "-S", "3", "--keep", "1"])
    assert rebuilt.exit_code == 2  # still refused: --keep is no licence
    rebuilt = runner.invoke(
        cli, ["refresh", out, a, b, *flat, "-S", "3", "--keep", "1", "--rebuild", "--json"]
    )
    assert rebuilt.exit_code == 0, rebuilt.output
    v3 = vs.current(out)
    assert v3 != v2 and vs.list_versions(out) == [v2, v3]  # nothing pruned by the rebuild
    assert "rebuilt with other options" in rebuilt.stderr
    assert json.loads(rebuilt.stdout)["counts"]["fgrams"] == 3
    assert v1 not in vs.list_versions(out)


@pytest.mark.parametrize("reader", ["index", "store"])
def test_a_reader_reads_one_version_while_current_switches(tmp_path, monkeypatch, reader):
    """`current` switches to another version between a reader's metadata and its arrays
    (a refresh finishing meanwhile): the reader resolved current once and reads that
    version whole, never the metadata of one and the arrays of the other."""
    import fgram.pipeline.tables.index as index_module
    from fgram import FgramIndex, FgramStore

    a = write_bin(str(tmp_path / "a.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4, 2, 3]] * 4, sep=0)
    b = write_bin(str(tmp_path / "b.bin"), [[5, 6, 5, 6, 1, 2], [4, 4, 4, 4]] * 5, sep=0)
    root = str(tmp_path / "t")
    opts = dict(dtype="uint16", doc_sep=0, min_count=3, engine="local")
    fgram.refresh(root, [a], **opts)
    fgram.index(root)
    fgram.embed(root, model="fgram.pipeline.models:hashed", engine="local")
    first = vs.current(root)
    fgram.refresh(root, [a, b], model="fgram.pipeline.models:hashed", **opts)
    second = vs.current(root)
    assert first != second
    vs.switch_current(root, first)
    real = index_module.read_meta

    def switching(*args, **kwargs):
        meta = real(*args, **kwargs)
        vs.switch_current(root, second)  # a refresh finished just now
        return meta

    monkeypatch.setattr(index_module, "read_meta", switching)
    opened = FgramIndex.open(root) if reader == "index" else FgramStore.open(root).index
    monkeypatch.setattr(index_module, "read_meta", real)
    want = FgramIndex.open(os.path.join(root, "versions", first))
    assert opened.meta == want.meta and vs.current(root) == second
    ids = opened.ids([[1, 2], [2, 3, 4], [5, 6]])
    assert ids.tolist() == want.ids([[1, 2], [2, 3, 4], [5, 6]]).tolist()


READER_LOOP = """
import os, sys
from fgram import FgramStore
root, stop, said = sys.argv[1], sys.argv[2], sys.argv[3]
opens = failures = 0
first = None
seen = set()
while not os.path.exists(stop):
    try:
        store = FgramStore.open(root, mode="mmap")
        assert store.index.meta["table"] == store.meta["table"]  # one version's both
        if str(store.meta["table"]) not in seen:  # the versions seen so far, told
            seen.add(str(store.meta["table"]))
            with open(said + ".tmp", "w") as f:
                f.write(" ".join(sorted(seen)))
            os.replace(said + ".tmp", said)
        opens += 1
    except Exception as exc:  # noqa: BLE001 - counted: the test wants none
        failures += 1
        first = first or repr(exc)
print(opens, failures, len(seen), first)
"""


def _seen(said, version: str, reader) -> None:
    """Wait until the reader has opened ``version`` (it reads on between refreshes: on a
    busy machine its first open may come after a refresh or two)."""
    import time

    deadline = time.time() + 60
    while not (said.exists() and version in said.read_text().split()):
        assert reader.poll() is None and time.time() < deadline, "the reader never opened it"
        time.sleep(0.01)


@pytest.mark.slow
def test_readers_never_fail_while_refreshes_switch_current(tmp_path):
    """A process opening the store through `current` in a loop while five refreshes
    build, carry the index and embeddings, and switch it: every open succeeds, and its
    index and rows are of one version."""
    import subprocess
    import sys

    root, stop = str(tmp_path / "t"), tmp_path / "stop"
    opts = dict(dtype="uint16", doc_sep=0, min_count=2, engine="local")
    shards = [write_bin(str(tmp_path / "s0.bin"), [[1, 2, 3, 1, 2, 3, 4], [2, 3, 4]] * 9, sep=0)]
    fgram.refresh(root, shards, **opts)
    fgram.index(root)
    fgram.embed(root, model="fgram.pipeline.models:hashed", engine="local")
    said = tmp_path / "seen"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER_LOOP, root, str(stop), str(said)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _seen(said, str(fgram.FgramStore.open(root).meta["table"]), reader)
        for i in range(1, 6):
            rng = np.random.default_rng(i)
            docs = [list(rng.integers(1, 9, 12)) for _ in range(30)]
            shards.append(write_bin(str(tmp_path / f"s{i}.bin"), docs, sep=0))
            fgram.refresh(root, shards, keep=3, model="fgram.pipeline.models:hashed", **opts)
            if i <= 2:  # it opens the first versions while the later ones are refreshed
                _seen(said, str(fgram.FgramStore.open(root).meta["table"]), reader)
    finally:
        stop.touch()
    opens, failures, versions, first = reader.communicate(timeout=120)[0].split(maxsplit=3)
    assert int(failures) == 0, first
    assert int(versions) >= 3, opens  # it read on while versions switched
