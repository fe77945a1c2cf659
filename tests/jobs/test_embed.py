"""fgram embed and the FgramStore against the table and a brute-force longest match."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import SUPPORT, build, interrupted_run, result, said, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

from fgram.cli import cli
from fgram.jobs.embed import run_embed
from fgram.pipeline.config.commands import EmbedConfig
from fgram.pipeline.errors import FgramError
from fgram.pipeline.tables.embed import FgramStore, from_stored, to_stored
from fgram.pipeline.tables.index import write_index

HERE = SUPPORT  # slow_models
ECHO = "fgram.pipeline.models:echo"


def small_table(path, k=4, docs=None):
    docs = docs or [[1, 2, 3, 1, 2, 3, 4, 1, 2], [2, 3, 4, 2, 3, 4, 1], [1, 2, 3, 4, 5]] * 3
    write_parquet(str(path / "a.parquet"), docs)
    out = path / "o"
    build(None, [path / "a.parquet"], out, max_len=k, min_count=2, engine="local")
    write_index(str(out))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_rows_land_at_their_ids_in_every_dtype(tmp_path, dtype):
    out = small_table(tmp_path)
    meta = run_embed(
        EmbedConfig(table=str(out), model=ECHO, float=dtype, batch=3, chunk_rows=5, engine="local")
    )
    fgrams = result(out)
    assert (
        meta["rows"] == len(fgrams) and meta["dim"] == 5 and meta["chunks"] == -(-len(fgrams) // 5)
    )
    store = FgramStore.open(str(out), mode="mmap")
    rows = store.rows(np.arange(len(fgrams)))
    for i, (tokens, _) in enumerate(fgrams):  # echo: (tokens, zero padding, length)
        expect = list(tokens) + [0] * (4 - len(tokens)) + [len(tokens)]
        assert rows[i].tolist() == expect
    assert np.load(out / "embeddings" / "matrix.npy").dtype == (
        np.uint16 if dtype == "bfloat16" else np.dtype(dtype)
    )


def test_spark_chunks_give_the_same_bytes_as_one_process(spark, tmp_path):
    out = small_table(tmp_path)
    model = "fgram.pipeline.models:hashed"
    run_embed(EmbedConfig(table=str(out), model=model, chunk_rows=3, batch=2, engine="local"))
    local = (out / "embeddings" / "matrix.npy").read_bytes()
    again = EmbedConfig(table=str(out), model=model, chunk_rows=3, batch=2, overwrite=True)
    meta = run_embed(again, spark=spark)
    assert meta["engine"] == "spark" and meta["chunks"] > 2
    assert (out / "embeddings" / "matrix.npy").read_bytes() == local


def test_bfloat16_round_trip_is_nearest_even():
    x = np.array([1.0, -2.5, 3.14159, 65504.0, 1e-3, 0.0], np.float32)
    back = from_stored(to_stored(x, "bfloat16"), "bfloat16")
    assert np.allclose(back, x, rtol=2**-8) and back[0] == 1.0 and back[-1] == 0.0
    assert np.array_equal(from_stored(to_stored(x, "float32"), "float32"), x)


@pytest.mark.slow
def test_killed_run_resumes_and_gives_the_same_bytes(tmp_path):
    out = small_table(tmp_path)
    n = len(result(out))
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "fgram",
        "embed",
        str(out),
        "--model",
        "slow_models:slow_echo",
        "--float",
        "float32",
        "--batch",
        "2",
        "--chunk-rows",
        "2",
        "--engine",
        "local",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = out / "embeddings.staging" / "_work" / "embed"  # a marker per chunk
    deadline = time.time() + 60
    while time.time() < deadline and len(list(done.glob("*.done.json"))) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list(done.glob("*.done.json")))
    assert 2 <= finished < -(-n // 2) and not (out / "embeddings").exists()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    meta = json.load(open(out / "embeddings" / "embeddings.json"))
    assert meta["chunks_resumed"] >= finished and not (out / "embeddings.staging").exists()
    resumed = (out / "embeddings" / "matrix.npy").read_bytes()
    run_embed(
        EmbedConfig(
            table=str(out),
            model="slow_models:slow_echo",
            float="float32",
            batch=2,
            chunk_rows=2,
            engine="local",
            overwrite=True,
        )
    )
    assert (out / "embeddings" / "matrix.npy").read_bytes() == resumed
    assert json.load(open(out / "embeddings" / "embeddings.json"))["sha256"] == meta["sha256"]


@pytest.mark.slow
def test_ctrl_c_of_an_embed_on_spark_is_one_line(tmp_path):
    """Ctrl-C to the process group while Spark runs the chunks: exit 130 and one line,
    not pyspark's job cancelling through the call the driver waits in (py4j's two
    logged tracebacks, ~46 lines)."""
    out = small_table(tmp_path)
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    cmd = [sys.executable, "-m", "fgram", "embed", str(out), "--model", "slow_models:slow_echo",
           "--batch", "1", "--chunk-rows", "2", "--engine", "spark"]  # fmt: skip
    done = str(out / "embeddings.staging" / "_work" / "embed" / "*.done.json")
    proc, err = interrupted_run(
        cmd, env, done, "a chunk", lambda proc: os.killpg(proc.pid, signal.SIGINT)
    )
    assert proc.returncode == 130, err[-3000:]
    staging = out / "embeddings.staging"  # kept: a rerun continues from its chunks
    assert said(err) == [
        f"fgram: interrupted; the embedded chunks are kept in {staging}: rerun it to continue"
    ], err[-3000:]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of a process's children (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append((int(entry), cmd))
    return out


@pytest.mark.slow
def test_a_spark_jvm_killed_is_one_line_saying_so(tmp_path):
    """The driver's JVM killed (SIGKILL, as the out-of-memory killer does) while Spark runs
    the chunks: exit 1 and one line that says the JVM was killed and what to do, not
    "Connection refused"; its crash reports never go to the working directory."""
    out = small_table(tmp_path)
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    cmd = [sys.executable, "-m", "fgram", "embed", str(out), "--model", "slow_models:slow_echo",
           "--batch", "1", "--chunk-rows", "2", "--engine", "spark"]  # fmt: skip

    def kill_the_jvm(proc):
        java = [p for p, c in _children(proc.pid) if "java" in c.split(" ")[0]]
        assert java, _children(proc.pid)
        os.kill(java[0], signal.SIGKILL)

    done = str(out / "embeddings.staging" / "_work" / "embed" / "*.done.json")
    proc, err = interrupted_run(cmd, env, done, "a chunk", kill_the_jvm, cwd=tmp_path)
    assert proc.returncode == 1, err[-3000:]
    lines = said(err)
    assert lines and lines[-1].startswith("fgram: error: the Spark JVM was killed (SIGKILL"), err
    assert "spark.driver.memory" in lines[-1] and "Connection refused" not in lines[-1]
    assert not [n for n in os.listdir(tmp_path) if n.startswith("hs_err")]


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.lists(st.integers(0, 4), max_size=30), min_size=1, max_size=6),
    k=st.integers(2, 5),
    probe=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 39), max_size=3),
)
def test_sequence_last_and_step_agree_with_brute_force(tmp_path_factory, docs, k, probe, cuts):
    d = tmp_path_factory.mktemp("emb")
    out = small_table(d, k=k, docs=docs + [[1, 2, 3, 1, 2, 3]])
    run_embed(
        EmbedConfig(table=str(out), model=ECHO, float="float32", chunk_rows=7, engine="local")
    )
    store = FgramStore.open(str(out), mode="ram")
    fgrams = {g: i for i, (g, _) in enumerate(result(out))}
    starts = sorted({c for c in cuts if c < len(probe)})
    exp_fid, exp_len = oracle_match(fgrams, probe, starts, k)
    rows, mlen, unmatched = store.embed_sequence(np.array(probe), doc_starts=starts)
    assert mlen.tolist() == exp_len and unmatched.tolist() == [f < 0 for f in exp_fid]
    assert np.array_equal(rows, store.rows(np.array(exp_fid)))
    assert not rows[unmatched].any()
    # decoding: each document's prefixes, last token only; and step by step
    bounds = [0] + starts + [len(probe)]
    contexts = [probe[a : i + 1] for a, b in zip(bounds, bounds[1:]) for i in range(a, b)]
    last_rows, last_len, last_un = store.embed_last(contexts)
    assert last_len.tolist() == exp_len and np.array_equal(last_rows, rows)
    state, got = None, []
    for i, t in enumerate(probe):
        if i in bounds[:-1]:
            state = store.start(1)
        r, ln, un = store.step(state, [t])
        got.append((int(ln[0]), bool(un[0]), r[0].tolist()))
    assert got == [(exp_len[i], exp_fid[i] < 0, rows[i].tolist()) for i in range(len(probe))]


def test_step_and_2d_embed_last_run_a_batch_side_by_side(tmp_path):
    out = small_table(tmp_path)
    run_embed(EmbedConfig(table=str(out), model=ECHO, float="float32", engine="local"))
    store = FgramStore.open(str(out))
    seqs = np.array([[1, 2, 3, 4, 1], [2, 3, 4, 2, 3], [5, 5, 1, 2, 3]])
    state = store.start(len(seqs))
    for j in range(seqs.shape[1]):
        rows, mlen, _ = store.step(state, seqs[:, j])
        rows2d, mlen2d, _ = store.embed_last(seqs[:, : j + 1])  # the 2-D fast path
        assert np.array_equal(rows2d, rows) and np.array_equal(mlen2d, mlen)
        for b in range(len(seqs)):
            r, m, _ = store.embed_sequence(seqs[b, : j + 1])
            assert mlen[b] == m[-1] and np.array_equal(rows[b], r[-1])


def test_stale_table_and_bad_input_refused(tmp_path):
    out = small_table(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["embed", str(out), "--model", "nope_module:f"])
    assert res.exit_code == 2 and "nope_module" in res.output.strip().splitlines()[-1]
    res = runner.invoke(cli, ["embed", str(out), "--model", "no-colon"])
    assert res.exit_code == 2 and "module:factory" in res.output
    res = runner.invoke(cli, ["lookup", str(out), "--tokens", "1,2,3"])  # matches only
    assert res.exit_code == 0 and "no embeddings: `fgram embed`" in res.output
    with pytest.raises(FgramError, match="embeddings.json: missing; run `fgram embed"):
        FgramStore.open(str(out))
    res = runner.invoke(cli, ["embed", str(out), "--model", ECHO, "--local", "--dtype", "float32"])
    assert res.exit_code == 2 and "No such option '--local'" in res.output  # gone before 1.0
    res = runner.invoke(
        cli, ["embed", str(out), "--model", ECHO, "--engine", "local", "--float", "float32"]
    )
    assert res.exit_code == 0, res.output
    assert json.load(open(out / "embeddings" / "embeddings.json"))["dtype"] == "float32"
    res = runner.invoke(cli, ["embed", str(out), "--model", ECHO, "--engine", "local"])
    assert res.exit_code == 2 and "embeddings: exists; pass --overwrite" in res.output
    res = runner.invoke(cli, ["embed", str(out), "--model", "nope_module:f"])  # said first
    assert res.exit_code == 2 and "nope_module" in res.output and "exists" not in res.output
    # like every job, embed takes --engine auto by default: no JVM on one machine (a
    # process of its own: this one may have a session up)
    fgram = os.path.join(os.path.dirname(sys.executable), "fgram")
    res = subprocess.run([fgram, "embed", str(out), "--model", ECHO, "--overwrite"], cwd=tmp_path)
    assert res.returncode == 0
    assert json.load(open(out / "embeddings" / "embeddings.json"))["engine"] == "local"
    res = runner.invoke(cli, ["lookup", str(out), "--tokens", "1,2,3,x"])
    assert res.exit_code == 2 and "separated by commas or spaces" in res.output
    for bad in ("99999999999", "-1"):  # no vocabulary named: ids of 0..2**31-1
        res = runner.invoke(cli, ["lookup", str(out), "--tokens", f"1,2,{bad}"])
        assert res.exit_code == 2 and f"--tokens: {bad} is not a token id" in res.output
    res = runner.invoke(cli, ["lookup", str(out), "--tokens", "1,2,3"])
    assert res.exit_code == 0 and len(res.output.strip().splitlines()) == 4
    m = json.load(open(out / "manifest.json"))
    m["seconds"] = -1
    json.dump(m, open(out / "manifest.json", "w"))
    with pytest.raises(FgramError, match="another f-gram table"):
        FgramStore.open(str(out))


def test_torch_reference_model_rows_at_their_ids(tmp_path):
    torch = pytest.importorskip("torch")
    from fgram.pipeline.models.torch import FgramTransformer, TorchModel, reference

    out = small_table(tmp_path)
    meta = run_embed(
        EmbedConfig(
            table=str(out),
            model="fgram.pipeline.models.torch:reference",
            device="cpu",
            float="float32",
            batch=3,
            chunk_rows=4,
            engine="local",
        )
    )
    assert meta["dim"] == 256 and meta["device"] == "cpu" and meta["model_seconds"] > 0
    model = reference("cpu")
    rows = FgramStore.open(str(out), mode="mmap").rows(np.arange(meta["rows"]))
    for i, (tokens, _) in enumerate(result(out)):  # each f-gram alone, without padding
        alone = model(np.array([tokens], np.int32), np.array([len(tokens)]))[0]
        assert np.allclose(rows[i], alone, atol=1e-4)
    # padding never leaks into the output at the last token
    m = TorchModel(FgramTransformer(torch.randn(10, 16), max_len=4, heads=2))
    a = m(np.array([[1, 2, 0, 0]], np.int32), np.array([2]))
    b = m(np.array([[1, 2, 7, 9]], np.int32), np.array([2]))
    assert np.allclose(a, b, atol=1e-5) and not np.allclose(
        a, m(np.array([[2, 1, 0, 0]], np.int32), np.array([2]))
    )


def test_device_needs_a_factory_that_takes_one(tmp_path):
    out = small_table(tmp_path)
    res = CliRunner().invoke(
        cli, ["embed", str(out), "--model", ECHO, "--device", "cpu", "--engine", "local"]
    )
    assert res.exit_code == 2 and "takes no device argument" in res.output


@pytest.mark.parametrize("damage", ["changed", "swapped"])
def test_rows_changed_in_a_killed_runs_staging_are_embedded_again(
    tmp_path, monkeypatch, capfd, damage
):
    """A killed embed's rows altered before the rerun (a disk's damage, a stray write, two
    rows swapped): each chunk's marker holds an XXH3 of its rows; a changed chunk is
    said and embedded again, and the published matrix is the one a clean run writes."""
    import fgram.jobs.embed as embed

    out = small_table(tmp_path)
    cfg = EmbedConfig(
        table=str(out), model="fgram.pipeline.models:echo", float="float32", chunk_rows=2,
        engine="local",
    )  # fmt: skip
    real, calls = embed.embed_task, []

    def dies_at_the_fourth(*args):
        if len(calls) == 3:
            raise RuntimeError("killed")
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(embed, "embed_task", dies_at_the_fourth)
    with pytest.raises(RuntimeError, match="killed"):
        run_embed(cfg)
    monkeypatch.setattr(embed, "embed_task", real)
    staged = np.load(out / "embeddings.staging" / "matrix.npy", mmap_mode="r+")
    if damage == "changed":
        staged[2, 0] += 1.0  # chunk 1's first row
    else:  # two 64-bit words of chunk 1 swapped: the sum of its words is the same
        words = staged[2:4].reshape(-1).view(np.uint64)
        assert words[0] != words[-1], words
        words[[0, -1]] = words[[-1, 0]]
    staged.flush()
    del staged
    capfd.readouterr()
    meta = run_embed(cfg)
    assert meta["chunks_resumed"] == 2  # chunks 0 and 2; chunk 1 again
    assert "the rows of chunk 1 are not as they were written" in capfd.readouterr().err
    resumed = np.load(out / "embeddings" / "matrix.npy")
    run_embed(EmbedConfig(**{**cfg.__dict__, "overwrite": True}))
    assert np.array_equal(np.load(out / "embeddings" / "matrix.npy"), resumed)
