"""Outputs and inputs on an object store: a real SeaweedFS S3 server (tests/support/s3server.py), no
mocks. Tables built to and from S3 equal local ones; readers (show, diff, index, coverage,
FgramIndex) take URIs; an overwrite never leaves a moment without a complete output; one
writer per output through a lease; every storage failure is one line, exit 2, no secret."""

import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import build, remote_result, result, said, wait_for_files, write_bin, write_parquet
from oracle import select
from s3server import SECRET, SeaweedS3, objects

from fgram.pipeline.io import publish
from fgram.pipeline.io.locks import LeaseLock
from fgram.pipeline.io.publish import staging_path
from fgram.pipeline.io.storage import locate
from fgram.pipeline.tables.index import FgramIndex, write_index
from fgram.pipeline.tables.versions import open_table

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")
DOCS = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 3], [5, 1, 2, 3, 1, 2], [], [7], [1, 2, 3, 4, 1, 2]]


def _put(s3, local: str, uri: str) -> None:
    locate(uri).upload(local)


@pytest.fixture
def corpus(tmp_path, s3):
    """The same documents as Parquet and as a flat file, locally and in a bucket."""
    bucket = s3.bucket()
    write_parquet(str(tmp_path / "a.parquet"), DOCS[:3], rows_per_group=1)
    write_bin(str(tmp_path / "b.bin"), DOCS[3:], sep=0)
    for name in ("a.parquet", "b.bin"):
        _put(s3, str(tmp_path / name), f"s3://{bucket}/in/{name}")
    return bucket


def _indexed_tables(tmp_path, bucket: str, name: str) -> str:
    """The corpus's table with its index, on S3 (returned) and in tmp_path/local."""
    uri = f"s3://{bucket}/tables/{name}"
    kw = dict(max_len=4, min_count=2, doc_sep=0, engine="local")
    build(None, [f"s3://{bucket}/in"], uri, **kw)
    build(None, [tmp_path / "a.parquet", tmp_path / "b.bin"], tmp_path / "local", **kw)
    write_index(uri)
    write_index(str(tmp_path / "local"))
    return uri


def _cli(*args, env=None, timeout=120, cwd=None):
    return subprocess.run(
        [FGRAM, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


@pytest.mark.spark
def test_build_with_input_and_output_on_s3_equals_local(spark, tmp_path, s3, corpus):
    kw = dict(max_len=4, min_count=2, doc_sep=0)
    local = build(spark, [tmp_path / "a.parquet", tmp_path / "b.bin"], tmp_path / "local", **kw)
    uri = f"s3://{corpus}/tables/t1"
    # Spark's workers get the endpoint and keys as storage options, not from the environment
    m = build(spark, [f"s3://{corpus}/in"], uri, storage=s3.options, **kw)
    assert remote_result(uri) == result(tmp_path / "local") == select(DOCS, 4, 2, None)
    assert m["fgrams"] == local["fgrams"]
    raw = locate(f"{uri}/manifest.json").read_bytes().decode()
    assert SECRET not in raw and '"secret_key": "***"' in raw  # no secret in a manifest
    assert not glob.glob(os.path.join(staging_path(locate(uri)), "*"))  # local staging gone
    names = objects(s3.filesystem(), f"{corpus}/tables/t1")
    parts = [n for n in names if n not in ("_SUCCESS", "manifest.json")]
    assert len(parts) == len(names) - 2 and all(n.startswith("fgrams/part-") for n in parts)
    assert sorted(parts) == sorted(open_table(uri)[1]["files"])


def test_index_show_diff_coverage_read_s3(tmp_path, s3, corpus):
    uri = _indexed_tables(tmp_path, corpus, "t2")
    local = FgramIndex.open(str(tmp_path / "local"))
    tokens = np.array([1, 2, 3, 4, 1, 2, 3, 5, 2, 3, 1])
    for mode in ("ram", "mmap"):
        fid, mlen = FgramIndex.open(uri, mode=mode).match(tokens)
        want = local.match(tokens)
        assert fid.tolist() == want[0].tolist() and mlen.tolist() == want[1].tolist()
        assert (fid >= 0).any()
    res = _cli("show", uri, "--top", "3")
    assert res.returncode == 0 and f"fgram table {uri}" in res.stdout, res.stderr
    res = _cli("diff", str(tmp_path / "local"), uri)
    assert res.returncode == 0 and "+0 added, -0 removed" in res.stdout, res.stderr
    res = _cli("coverage", uri, f"s3://{corpus}/in", "--doc-sep", "0", "--engine", "local")
    ref = _cli(
        "coverage",
        str(tmp_path / "local"),
        str(tmp_path / "a.parquet"),
        str(tmp_path / "b.bin"),
        "--doc-sep",
        "0",
        "--engine",
        "local",
    )
    assert res.returncode == 0 and res.stderr.count("\n") <= 1, res.stderr
    assert res.stdout.split("\n", 1)[1] == ref.stdout.split("\n", 1)[1]  # past the header
    assert res.stdout.startswith(f"coverage of {uri} over 1 input:\n")


def test_report_of_an_s3_table_onto_s3_equals_local(tmp_path, s3, corpus):
    """fgram report of a table on S3, its held-out shards on S3 and its page and JSON
    written to S3: the numbers of the same report made locally."""
    import json

    uri = _indexed_tables(tmp_path, corpus, "t4")
    page = f"s3://{corpus}/reports/t4.html"
    args = ["--doc-sep", "0", "--engine", "local", "--sizes", "2,5,100"]
    res = _cli("report", uri, "-o", page, "--heldout", f"s3://{corpus}/in", *args)
    assert res.returncode == 0 and f"-> {page}" in res.stdout, res.stderr
    ref = _cli(
        "report", str(tmp_path / "local"), "-o", str(tmp_path / "r.html"),
        "--heldout", str(tmp_path / "a.parquet"), "--heldout", str(tmp_path / "b.bin"), *args,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr
    mine = json.loads(locate(f"s3://{corpus}/reports/t4.json").read_bytes())
    theirs = json.load(open(tmp_path / "r.json"))
    same = ("by_length", "rank_frequency", "top")
    assert {k: mine[k] for k in same} == {k: theirs[k] for k in same}
    for a, b in zip(mine["passes"], theirs["passes"], strict=True):
        assert {**a, "seconds": 0} == {**b, "seconds": 0}
    assert mine["coverage"]["by_size"] == theirs["coverage"]["by_size"]
    assert mine["source"] == uri and mine["coverage"]["positions"] == sum(map(len, DOCS))
    assert b"data:image/png;base64," in locate(page).read_bytes()
    again = _cli("report", uri, "-o", page)
    assert again.returncode == 2 and f"{page}: exists; pass --overwrite" in again.stderr


def test_index_copy_is_checked_against_its_checksum(tmp_path, s3, corpus, monkeypatch):
    uri = f"s3://{corpus}/tables/t3"
    build(None, [f"s3://{corpus}/in"], uri, max_len=3, min_count=2, doc_sep=0, engine="local")
    meta = write_index(uri)
    name = meta["files"]["suffix.npy"]["object"]
    obj = locate(f"{uri}/index/{name}")
    data = bytearray(obj.read_bytes())
    data[-1] ^= 0xFF
    obj.write_bytes(bytes(data))
    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    for mode in ("ram", "mmap"):
        with pytest.raises(Exception, match="checksum mismatch"):
            FgramIndex.open(uri, mode=mode)
    kept = os.listdir(tmp_path / "cache" / "remote")  # the good arrays' copies only
    assert kept and f"{meta['files']['suffix.npy']['sha256']}.npy" not in kept
    assert not [n for n in kept if n.endswith(".tmp")]


def test_overwrite_keeps_a_complete_output_at_every_step(tmp_path, s3, corpus, monkeypatch):
    uri = f"s3://{corpus}/tables/t4"
    kw = dict(max_len=4, doc_sep=0, engine="local")
    build(None, [f"s3://{corpus}/in"], uri, min_count=2, **kw)
    old = remote_result(uri)
    seen = []
    upload_all = publish.upload_all

    def checked(pairs):  # the new generation's files are up, not yet switched to
        upload_all(pairs)
        seen.append(remote_result(uri))

    monkeypatch.setattr(publish, "upload_all", checked)
    build(None, [f"s3://{corpus}/in"], uri, min_count=3, overwrite=True, **kw)
    new = remote_result(uri)
    assert seen == [old] and new == select(DOCS, 4, 3, None) != old
    names = objects(s3.filesystem(), f"{corpus}/tables/t4")
    loc, manifest = open_table(uri)
    assert sorted(manifest["files"] + ["_SUCCESS", "manifest.json"]) == names  # old ones gone


def test_second_writer_is_refused_through_the_lease(tmp_path, s3, corpus):
    uri = f"s3://{corpus}/tables/t5"
    with LeaseLock(locate(uri)):
        res = _cli("build", uri, f"s3://{corpus}/in", "--doc-sep", "0", "--engine", "local")
        assert res.returncode == 2 and "another fgram run is writing it" in res.stderr
        assert len(said(res.stderr)) == 1
    res = _cli(
        "build", uri, f"s3://{corpus}/in", "--doc-sep", "0", "--engine", "local", "--min-count", "2"
    )
    assert res.returncode == 0 and said(res.stderr) == [], res.stderr  # nothing else said
    assert objects(s3.filesystem(), f"{corpus}/tables/.t5.fgram-lock") == []  # released


def _one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = said(res.stderr.strip())
    assert len(lines) == 1 and lines[0].startswith("fgram: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert SECRET not in res.stderr and "wrong-secret-123" not in res.stderr


def test_a_missing_object_store_input_is_found_before_the_jvm_starts(
    tmp_path, s3, corpus, monkeypatch
):
    import fgram.jobs.table.driver as b
    from fgram.jobs import sequence
    from fgram.pipeline.config.commands import BuildConfig
    from fgram.pipeline.errors import InputError

    def no_jvm(*a, **k):
        raise AssertionError("the executor was started before the inputs were checked")

    monkeypatch.setattr(sequence, "Starting", no_jvm)  # every job's executor starts there
    for missing, why in (
        (f"s3://{corpus}/in/nope.bin", "no such file"),
        (f"s3://{corpus}/nothing/", "no such file"),
        ("s3://no-such-bucket-fgram/in", "no such bucket"),
    ):
        with pytest.raises(InputError, match=why) as err:
            b.run_build(
                BuildConfig(inputs=[f"s3://{corpus}/in", missing], output=str(tmp_path / "o"))
            )
        assert missing.rstrip("/") in str(err.value)
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.slow
def test_storage_failures_are_one_line_in_bounded_time(tmp_path, s3, corpus):
    src = str(tmp_path / "b.bin")
    base = ["--doc-sep", "0", "--engine", "local"]
    _one_line_error(
        _cli("build", "foo://bucket/x", src, *base), "foo://bucket/x", "unknown storage scheme"
    )
    _one_line_error(
        _cli("build", "s3://no-such-bucket-fgram/x", src, *base),
        "s3://no-such-bucket-fgram/x",
        "no such bucket",
    )
    _one_line_error(
        _cli(
            "build",
            f"s3://{corpus}/x",
            src,
            *base,
            env={"AWS_SECRET_ACCESS_KEY": "wrong-secret-123"},
        ),
        f"s3://{corpus}/x",
        "access denied",
    )
    _one_line_error(
        _cli(
            "build",
            f"s3://{corpus}/x",
            src,
            *base,
            "--storage-option",
            f"access_key={s3.options['access_key']}",
            "--storage-option",
            "secret_key=wrong-secret-123",
        ),
        "access denied",
    )
    t0 = time.time()
    _one_line_error(
        _cli(
            "build", f"s3://{corpus}/x", src, *base, env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
        ),
        f"s3://{corpus}/x",
        "connection refused",
    )
    assert time.time() - t0 < 60
    _one_line_error(_cli("show", f"s3://{corpus}/nothing-here"), "no such file or folder")
    _one_line_error(
        _cli("build", str(tmp_path / "o"), f"s3://{corpus}/in/missing.bin", *base),
        f"s3://{corpus}/in/missing.bin",
        "no such file",
    )
    _one_line_error(
        _cli("build", f"s3://{corpus}/x", src, *base, "--storage-option", "no_such_setting=1"),
        "--storage-option",
    )
    uri = f"s3://{corpus}/tables/t6"
    assert _cli("build", uri, src, *base, "--min-count", "1").returncode == 0
    _one_line_error(_cli("build", uri, src, *base), uri, "output exists")
    # every writer takes an object-store output from the command line, and writes nowhere else
    assert (
        _cli(
            "build",
            str(tmp_path / "t"),
            src,
            *base,
            "--min-count",
            "1",
            "--storage-option",
            "region=us-east-1",
        ).returncode
        == 0
    )
    assert _cli("index", str(tmp_path / "t")).returncode == 0
    for args in (
        ("refresh", f"s3://{corpus}/r", src, *base),
        ("annotate", str(tmp_path / "t"), src, "-o", f"s3://{corpus}/tags", *base),
        ("embed", uri, "--model", "fgram.pipeline.models:hashed", "--engine", "local"),
    ):
        res = _cli(*args, cwd=tmp_path)
        assert res.returncode == 0 and "s3://" in res.stdout, res.stderr
    _one_line_error(
        _cli("synth", "-o", f"s3://{corpus}/syn", cwd=tmp_path), "s3://", "local folder"
    )
    assert not os.path.exists(tmp_path / "s3:") and not os.path.exists("s3:")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["crash", "freeze"])
def test_store_stopped_mid_build_fails_cleanly_and_resume_finishes(tmp_path, how):
    """Input and output on a server of this test's own, stopped during pass 3 (a crash:
    connections refused; a freeze, SIGSTOP: connections taken, nothing answered): one
    line in bounded time, exit 2, the completed passes kept; once it is back, --resume
    gives the table."""
    server = SeaweedS3(str(tmp_path / "weed")).start()
    try:
        bucket = server.bucket()
        flat = np.random.default_rng(5).integers(1, 40, 600_000).astype(np.uint16)
        flat[::50] = 0
        flat.tofile(tmp_path / "c.bin")
        docs = [d.tolist() for d in np.split(flat, np.flatnonzero(flat == 0))]
        docs = [d[1:] if d and d[0] == 0 else d for d in docs]
        locate(f"s3://{bucket}/c.bin", server.options).upload(str(tmp_path / "c.bin"))
        env = {**server.env, "FGRAM_CACHE_DIR": str(tmp_path / "cache")}
        uri = f"s3://{bucket}/out"
        cmd = [
            FGRAM,
            "build",
            uri,
            f"s3://{bucket}/c.bin",
            "--doc-sep",
            "0",
            "-K",
            "4",
            "--min-count",
            "3",
            "--unit-tokens",
            "10000",
            "--engine",
            "local",
        ]
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for_files(
            str(
                tmp_path
                / "cache"
                / "remote-runs"
                / ".*staging"
                / "_work"
                / "pass3"
                / "count"
                / "*.done.json"
            ),
            proc,
            120,
            "pass 3",
        )
        if how == "crash":
            server.stop(hard=True)  # at once: in the middle of the pass
        else:
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGSTOP)
        t0 = time.time()
        out, err = proc.communicate(timeout=300)
        took = time.time() - t0
        print(f"{how}: the build ended {took:.1f} s after the store stopped")
        assert took < 60  # bounded retries; the first failure ends it
        _one_line_error(
            subprocess.CompletedProcess(cmd, proc.returncode, out, err),
            uri[:-4],
            "cannot reach the object store" if how == "crash" else "did not answer in time",
            "--resume",
        )
        if how == "crash":
            server.start()
        else:
            assert server.proc is not None
            os.kill(server.proc.pid, signal.SIGCONT)
        res = subprocess.run(
            cmd + ["--resume"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert res.returncode == 0, res.stderr
        opts = server.options
        assert remote_result(uri, opts) == select(docs, 4, 3, None)
        assert open_table(uri, opts)[1]["resumed"]["from_pass"] == 3
    finally:
        server.stop()


@pytest.mark.slow
def test_sigkill_mid_build_with_output_on_s3_then_resume(tmp_path, s3):
    bucket = s3.bucket()
    flat = np.random.default_rng(9).integers(1, 60, 150_000).astype(np.uint16)
    flat[::40] = 0
    flat.tofile(tmp_path / "c.bin")
    env = {**os.environ, "FGRAM_CACHE_DIR": str(tmp_path / "cache")}
    uri = f"s3://{bucket}/out"
    cmd = [
        FGRAM,
        "build",
        uri,
        str(tmp_path / "c.bin"),
        "--doc-sep",
        "0",
        "-K",
        "4",
        "--size",
        "2000",
        "--unit-tokens",
        "4000",
        "--master",
        "local[2]",
    ]
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_files(
            str(
                tmp_path
                / "cache"
                / "remote-runs"
                / ".*staging"
                / "_work"
                / "pass3"
                / "count"
                / "*.done.json"
            ),
            proc,
            240,
            "pass 3",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not locate(uri).exists()  # nothing half-published
    res = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ref = subprocess.run(
        [FGRAM, "build", str(tmp_path / "ref"), str(tmp_path / "c.bin"), *cmd[4:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ref.returncode == 0, ref.stderr
    assert remote_result(uri) == result(tmp_path / "ref")
    got = open_table(uri)[1]
    assert got["resumed"]["from_pass"] == 3
    ref_files = sorted(os.listdir(tmp_path / "ref" / "fgrams"))
    for name, remote_name in zip(
        ref_files, sorted(f for f in got["files"] if f.startswith("fgrams/"))
    ):
        assert (
            locate(f"{uri}/{remote_name}").read_bytes()
            == open(tmp_path / "ref" / "fgrams" / name, "rb").read()
        )  # identical bytes


@pytest.mark.slow
def test_refresh_root_on_s3_adds_changes_and_removes_shards(tmp_path, s3, monkeypatch):
    """Versions, store and `current` on S3: each version equals the oracle; the pointer
    object switches; old versions and unreferenced store objects are deleted there."""
    from fgram.jobs.refresh import run_refresh, store
    from fgram.pipeline.config.commands import BuildConfig
    from fgram.pipeline.tables import versions as vs

    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    bucket = s3.bucket()
    rng = np.random.default_rng(5)
    shards = {
        n: [rng.integers(1, 6, int(rng.integers(3, 30))).tolist() for _ in range(12)]
        for n in ("a", "b", "c")
    }
    changed = [doc[::-1] + [5, 5] for doc in shards["a"]]
    root = f"s3://{bucket}/fg"

    def put(name, docs):
        _put(
            s3,
            write_bin(str(tmp_path / f"{name}.bin"), docs, sep=0),
            f"s3://{bucket}/in/{name}.bin",
        )

    def refresh(names):
        cfg = BuildConfig(
            inputs=[f"s3://{bucket}/in/{n}.bin" for n in names],
            output=root,
            engine="local",
            unit_tokens=50,
            doc_sep=0,
            max_len=4,
            min_count=3,
        )
        return run_refresh(cfg, keep=2)

    for name, docs in shards.items():
        put(name, docs)
    steps = [
        (["a"], shards["a"]),
        (["a", "b"], shards["a"] + shards["b"]),
        (["a", "b", "c"], shards["a"] + shards["b"] + shards["c"]),
        (["a", "b", "c"], changed + shards["b"] + shards["c"]),  # a changed in place
        (["b", "c"], shards["b"] + shards["c"]),
    ]  # a removed
    versions, seen = [], []
    switch = vs.switch_current

    def checked(where, vid):  # the new version is up, `current` not yet switched to it
        assert vs.is_finished(vs.version_path(where, vid))
        seen.append(remote_result(root) if vs.current(where) else None)
        switch(where, vid)

    monkeypatch.setattr(vs, "switch_current", checked)
    for i, (names, docs) in enumerate(steps):
        if i == 3:
            put("a", changed)
        before = remote_result(root) if i else None
        res = refresh(names)
        assert seen[-1] == before  # readers saw the old version whole until the switch
        assert res["built"] and remote_result(root) == select(docs, 4, 3, None), i
        versions.append(res["version"])
        cur = locate(f"{root}/current").read_bytes().decode().strip()
        assert cur == f"versions/{res['version']}" and vs.current(locate(root)) == res["version"]
    m = res["manifest"]
    assert m["refresh"]["store_reused"] and m["refresh"]["removed_shards"] == 1
    assert m["refresh"]["new_shards"] == 0
    assert refresh(["b", "c"])["built"] is False  # nothing changed
    assert vs.list_versions(locate(root)) == sorted(versions[-2:])  # --keep 2, on the store
    named = set()
    for vid in versions[-2:]:
        named |= store.referenced(locate(f"{root}/versions/{vid}/store.json").read_json())
    assert set(objects(s3.filesystem(), f"{bucket}/fg/store/objects")) == named
    # a fresh machine (an empty cache) reads the store from S3 alone
    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache2"))
    put("c", shards["a"])
    assert refresh(["b", "c"])["built"]
    assert remote_result(root) == select(shards["b"] + shards["a"], 4, 3, None)
    # readers take the root: show, diff, index, as for a local refresh folder
    res = _cli("show", root, "--top", "3")
    assert res.returncode == 0 and "f-grams" in res.stdout, res.stderr
    res = _cli("diff", f"{root}/versions/{versions[-1]}", root, "--json")
    assert res.returncode == 0 and '"added"' in res.stdout, res.stderr
    write_index(root)
    assert FgramIndex.open(root, mode="ram").meta["fgrams"] == len(remote_result(root))


@pytest.mark.parametrize("staged", ["here", "on-store"])
def test_annotate_to_s3_equals_local_and_training_sequences_read_it(
    tmp_path, s3, corpus, monkeypatch, staged
):
    """Parquet and flat tags of S3 inputs, written to S3: staged on this machine (local
    mode) or on the store (a cluster's way: per-unit objects, then one per flat shard)."""
    import pyarrow.parquet as pq

    import fgram.jobs.annotate as an
    from fgram.pipeline.tables.tags import tag_file, training_sequences

    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    table = f"s3://{corpus}/tables/ann-{staged}"
    kw = dict(max_len=4, min_count=2, doc_sep=0, engine="local")
    build(None, [f"s3://{corpus}/in"], table, **kw)
    write_index(table)
    if staged == "on-store":
        monkeypatch.setattr(an, "runs_here", lambda cfg: False)
    out = f"s3://{corpus}/tags-{staged}"
    cfg = dict(doc_sep=0, engine="local", unit_tokens=4)
    m = an.run_annotate(
        an.AnnotateConfig(table=table, inputs=[f"s3://{corpus}/in"], output=out, **cfg)
    )
    ref = an.run_annotate(
        an.AnnotateConfig(
            table=table,
            inputs=[str(tmp_path / "a.parquet"), str(tmp_path / "b.bin")],
            output=str(tmp_path / "tags"),
            **cfg,
        )
    )
    assert m["coverage"] == ref["coverage"] and m["coverage"]["positions"] > 0
    loc = locate(out)
    manifest = loc.child("manifest.json").read_json()
    names = objects(s3.filesystem(), f"{corpus}/tags-{staged}")
    assert sorted(manifest["files"] + ["_SUCCESS", "manifest.json"]) == names
    assert not [n for n in objects(s3.filesystem(), corpus) if "fgram-staging" in n]
    for rel in ref["files"]:
        got, want = tag_file(loc, manifest, rel), str(tmp_path / "tags" / rel)
        if rel.endswith(".npy"):
            import io

            assert np.array_equal(np.load(io.BytesIO(got.read_bytes())), np.load(want)), rel
        else:
            assert pq.read_table(got.path, filesystem=got.fs).equals(pq.read_table(want)), rel
    seq = [tuple(a.tolist() for a in s) for s in training_sequences(out, 5)]
    assert (
        seq == [tuple(a.tolist() for a in s) for s in training_sequences(str(tmp_path / "tags"), 5)]
        and seq
    )


@pytest.mark.parametrize("layout", ["olmo", "megatron"])
def test_raw_layouts_assembled_on_the_store_equal_local(tmp_path, s3, monkeypatch, layout):
    """OLMo's raw memmaps and Megatron's sibling IndexedDataset written as a cluster
    writes them (per-unit objects joined on the store, the index beside them): the same
    bytes as a local run's, and `FgramTags` reads the same windows."""
    from helpers import megatron

    import fgram.jobs.annotate as an
    from fgram.pipeline.tables.tags import FgramTags, tag_file

    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    bucket = s3.bucket()
    (tmp_path / "in").mkdir()
    if layout == "olmo":
        names = ["b.bin"]
        write_bin(str(tmp_path / "in" / "b.bin"), DOCS, sep=0)
    else:
        names = ["b.bin", "b.idx"]
        megatron(tmp_path / "in" / "b", [[d[:3], d[3:]] for d in DOCS])
    for name in names:
        _put(s3, str(tmp_path / "in" / name), f"s3://{bucket}/in/{name}")
    read = dict(doc_sep=0) if layout == "olmo" else {}
    build(None, [tmp_path / "in"], tmp_path / "t", max_len=4, min_count=2, engine="local", **read)
    write_index(str(tmp_path / "t"))
    opts = dict(engine="local", unit_tokens=4, layout=layout, **read)
    ref = an.run_annotate(
        an.AnnotateConfig(
            table=str(tmp_path / "t"),
            inputs=[str(tmp_path / "in")],
            output=str(tmp_path / "L"),
            **opts,
        )
    )
    monkeypatch.setattr(an, "runs_here", lambda cfg: False)
    out = f"s3://{bucket}/tags"
    an.run_annotate(
        an.AnnotateConfig(
            table=str(tmp_path / "t"), inputs=[f"s3://{bucket}/in"], output=out, **opts
        )
    )
    loc = locate(out)
    manifest = loc.child("manifest.json").read_json()
    want = {"olmo": 2, "megatron": 4}[layout]
    assert len(ref["files"]) == len(manifest["files"]) == want
    for rel in ref["files"]:
        got = tag_file(loc, manifest, rel).read_bytes()
        assert got == (tmp_path / "L" / rel).read_bytes(), rel
    here, there = FgramTags.open(tmp_path / "L"), FgramTags.open(out)
    offsets = np.arange(len(here) - 4)
    for a, b in zip(here.windows(offsets, 5), there.windows(offsets, 5), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("staged", ["here", "on-store"])
def test_embed_to_s3_and_the_store_reads_it(tmp_path, s3, corpus, monkeypatch, staged):
    """embed into a table on S3 (chunks staged on this machine, or as objects on the store:
    a cluster's way, then streamed into one matrix object); FgramStore and lookup read it
    (ram, or a checked copy in the cache); the same bytes as a local table's."""
    import fgram.jobs.embed as em
    from fgram.pipeline.config.commands import EmbedConfig
    from fgram.pipeline.tables.embed import FgramStore

    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path / "cache"))
    uri = _indexed_tables(tmp_path, corpus, f"emb-{staged}")
    if staged == "on-store":
        monkeypatch.setattr(em, "runs_here", lambda cfg: False)
    opts = dict(model="fgram.pipeline.models:hashed", chunk_rows=3, batch=2, engine="local")
    em.run_embed(EmbedConfig(table=str(tmp_path / "local"), **opts))
    meta = None
    for overwrite in (False, True):  # the second run replaces the first generation
        meta = em.run_embed(EmbedConfig(table=uri, overwrite=overwrite, **opts))
    want = np.load(tmp_path / "local" / "embeddings" / "matrix.npy")
    assert meta["chunks"] > 2 and meta["rows"] == len(want)
    names = objects(s3.filesystem(), f"{corpus}/tables/emb-{staged}/embeddings")
    assert names == sorted(["embeddings.json", meta["files"]["matrix.npy"]["object"]])
    assert not [
        n for n in objects(s3.filesystem(), f"{corpus}/tables/emb-{staged}") if "staging" in n
    ]
    tokens = np.array([1, 2, 3, 4, 1, 2, 3, 5, 2, 3, 1])
    ref = FgramStore.open(str(tmp_path / "local"), mode="ram").embed_sequence(tokens)
    for mode in ("ram", "mmap"):
        store = FgramStore.open(uri, mode=mode)
        assert np.array_equal(store.matrix, want)
        got = store.embed_sequence(tokens)
        assert all(np.array_equal(a, b) for a, b in zip(got, ref)) and not got[2].all()
    res = _cli("lookup", uri, "--tokens", "1,2,3,4")
    ref = _cli("lookup", str(tmp_path / "local"), "--tokens", "1,2,3,4")
    assert res.returncode == 0 and res.stdout == ref.stdout, res.stderr
