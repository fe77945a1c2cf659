"""A real Spark standalone cluster on 127.0.0.1: one master, two 1-core workers, started
with the `spark-class` script that pyspark ships and stopped by process group, also on
failure. `fgram build` runs against it with --master, through spark-submit with the package
shipped as a zip (--py-files), and while one worker is killed mid-job; every table must equal
local mode's, row for row.

Deselect with ``-m "not cluster"``; `.ci/run` runs it.
"""

import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

import numpy as np
import pytest
from helpers import build, result, said, wait_for_files
from oracle import select, split_flat

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

BIN = os.path.dirname(sys.executable)
from helpers import REPO, SUPPORT  # noqa: E402


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _free_ports(n: int) -> list[int]:
    """n distinct free ports, chosen while all are held (a port released before the next
    is chosen can be chosen again, or taken by a worker's random port: the master's UI
    then answered with a worker's page)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _env() -> dict:
    return dict(
        os.environ,
        SPARK_HOME=_spark_home(),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PATH=BIN + os.pathsep + os.environ["PATH"],
        SPARK_NO_DAEMONIZE="1",
    )


class Cluster:
    def __init__(self, tmp, private: bool = False):
        self.tmp = tmp
        self.private = private
        self.procs: list[subprocess.Popen] = []
        self.port, self.ui, *self.worker_ports = _free_ports(2 + 2 * 4)
        self.url = f"spark://127.0.0.1:{self.port}"

    def _start(self, name, *args):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        cls = os.path.join(_spark_home(), "bin", "spark-class")
        env, cwd = _env(), None
        if self.private:  # its own scratch, temp and working folders: nothing shared but S3
            own = {what: os.path.join(self.tmp, name, what) for what in ("local", "tmp", "cwd")}
            for folder in own.values():
                os.makedirs(folder, exist_ok=True)
            env = dict(env, SPARK_LOCAL_DIRS=own["local"], TMPDIR=own["tmp"])
            cwd = own["cwd"]
        p = subprocess.Popen(
            [cls, *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )  # its own group: it and children
        self.procs.append(p)
        return p

    def start(self, workers=2):
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui),
        )
        self.workers = [self._worker(i) for i in range(workers)]
        self.wait_workers(workers)
        return self

    def _worker(self, i):
        return self._start(
            f"worker{i}",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--port",
            str(self.worker_ports[2 * i]),
            "--webui-port",
            str(self.worker_ports[2 * i + 1]),
            "--work-dir",
            os.path.join(self.tmp, f"w{i}"),
        )

    def add_worker(self, i):
        """Worker ``i`` (again): a lost one replaced."""
        self.workers.append(self._worker(i))
        self.wait_workers(1)

    def wait_workers(self, n):
        deadline = time.time() + 120
        while self.alive_workers() < n:
            assert time.time() < deadline, "the workers did not register"
            assert all(p.poll() is None for p in self.procs if p in self.workers[-n:]), (
                "a cluster process died"
            )
            time.sleep(0.5)

    def alive_workers(self) -> int:
        """ALIVE workers, from the master's JSON page. A port picked free can be taken by
        another process before the master binds it (one run got another Spark UI's HTML
        page there); the master then binds the next one, as Spark retries ports."""
        for port in range(self.ui, self.ui + 4):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=2) as r:
                    state = json.load(r)
            except (OSError, ValueError):
                continue
            if isinstance(state, dict) and state.get("url") == self.url:
                return sum(w["state"] == "ALIVE" for w in state.get("workers", []))
        return 0

    def kill(self, p):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def stop(self):
        for p in self.procs:
            self.kill(p)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("cluster")))
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    subprocess.run(
        [
            os.path.join(BIN, "fgram"),
            "synth",
            "-o",
            str(d / "syn"),
            "--tokens",
            "200000",
            "--vocab",
            "300",
            "--format",
            "bin",
        ],
        check=True,
        capture_output=True,
    )
    path = glob.glob(str(d / "syn" / "*.bin"))[0]
    return path, split_flat(np.fromfile(path, dtype=np.uint16).tolist(), 0)


ARGS = [
    "--dtype",
    "uint16",
    "--doc-sep",
    "0",
    "--size",
    "3000",
    "-K",
    "4",
    "--unit-tokens",
    "25000",
    "--conf",
    "spark.executor.memory=512m",
]


def _local(spark, src, out):
    build(spark, [src], out, dtype="uint16", doc_sep=0, size=3000, max_len=4, unit_tokens=25000)
    return result(out)


def test_build_with_master_equals_local_mode(spark, cluster, corpus, tmp_path):
    src, docs = corpus
    res = subprocess.run(
        [
            os.path.join(BIN, "fgram"),
            "build",
            str(tmp_path / "c"),
            src,
            "--master",
            cluster.url,
            *ARGS,
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert result(tmp_path / "c") == _local(spark, src, tmp_path / "l") == select(docs, 4, 5, 3000)


def test_spark_submit_with_the_package_zipped(spark, cluster, corpus, tmp_path):
    """What a cluster user does: ship the package as a zip (--py-files), submit the job file
    (a scheduled refresh, whose first version is the build's table, with its result as
    JSON on stdout)."""
    command = "refresh"
    src, docs = corpus
    shipped = str(tmp_path / "fgram.zip")
    with zipfile.ZipFile(shipped, "w") as z:
        for root, dirs, files in os.walk(os.path.join(REPO, "fgram")):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                if f.endswith(".py"):
                    full = os.path.join(root, f)
                    z.write(full, os.path.relpath(full, REPO))
    res = subprocess.run(
        [
            os.path.join(BIN, "spark-submit"),
            "--master",
            cluster.url,
            "--py-files",
            shipped,
            "--conf",
            "spark.ui.enabled=false",
            os.path.join(REPO, "fgram", "__main__.py"),
            command,
            str(tmp_path / "s"),
            src,
            *ARGS,
            "--json",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["status"] == "built" and out["command"] == command
    made = tmp_path / "s" / ("current" if command == "refresh" else "")
    assert result(made) == _local(spark, src, tmp_path / "l")
    assert out["counts"]["fgrams"] == len(result(made))


def test_a_worker_killed_mid_job_still_gives_the_exact_table(spark, corpus, tmp_path):
    """Its executor dies with it; Spark reruns the lost tasks on the other worker."""
    src, docs = corpus
    c = Cluster(str(tmp_path))
    try:
        c.start()
        out = tmp_path / "k"
        proc = subprocess.Popen(
            [os.path.join(BIN, "fgram"), "build", str(out), src, "--master", c.url, *ARGS],
            env=_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        pass3 = os.path.join(str(tmp_path), ".k.fgram-staging", "_work", "pass3")
        wait_for_files(os.path.join(pass3, "count", "*.done.json"), proc, 300, "pass 3")
        c.kill(c.workers[0])  # mid-job: pass 3 is counting
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert c.alive_workers() == 1
        assert result(out) == _local(spark, src, tmp_path / "l") == select(docs, 4, 5, 3000)
    finally:
        c.stop()


def test_every_worker_lost_is_one_line_in_bounded_time_then_a_rerun_finishes(
    spark, corpus, tmp_path
):
    """The only worker killed while its executor embeds (a slow model: the job is on
    the cluster when it dies): no executor is left, and Spark would wait for one
    forever. The run ends in one line within the wait it was given, its chunks kept;
    with a worker back, a rerun gives the same rows as a local run."""
    src, _ = corpus
    table = tmp_path / "t"  # 300 f-grams: 30 chunks of 0.2 s
    build(spark, [src], table, dtype="uint16", doc_sep=0, size=300, max_len=4)
    here = SUPPORT
    c = Cluster(str(tmp_path))
    try:
        c.start(workers=1)
        cmd = [os.path.join(BIN, "fgram"), "embed", str(table), "--model",
               "slow_models:slow_echo", "--float", "float32", "--chunk-rows", "10",
               "--batch", "10", "--master", c.url, "--conf", "spark.fgram.executorWait=6",
               "--conf", f"spark.executorEnv.PYTHONPATH={here}"]  # fmt: skip
        env = dict(_env(), PYTHONPATH=here)
        proc = subprocess.Popen(
            cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        done = table / "embeddings.staging" / "_work" / "embed"  # a marker per chunk
        wait_for_files(str(done / "*.done.json"), proc, 300, "a chunk")
        c.kill(c.workers[0])
        t0 = time.time()
        _, err = proc.communicate(timeout=300)
        assert time.time() - t0 < 90, err[-3000:]
        lines = [line for line in said(err) if line.startswith("fgram")]  # Spark's ERROR
        assert proc.returncode == 2 and len(lines) == 1, err[-3000:]  # lines apart
        assert "no executor for 6 s" in lines[0], lines[0]
        assert not (table / "embeddings").exists() and os.listdir(done)
        c.add_worker(1)
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        rows = (table / "embeddings" / "matrix.npy").read_bytes()
        res = subprocess.run(
            [*cmd[:11], "--engine", "local", "--overwrite"], env=env, capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        assert (table / "embeddings" / "matrix.npy").read_bytes() == rows
    finally:
        c.stop()


def test_output_on_s3_with_nothing_shared_and_a_worker_killed(spark, corpus, tmp_path, s3):
    """No shared filesystem: the master and each worker have private scratch, temp and
    working folders, the input and the output are on S3, and so are the intermediates
    (the run's staging prefix). A worker is killed while pass 3 counts. The table must
    equal local mode's."""
    from helpers import remote_result
    from s3server import objects

    from fgram.pipeline.io.storage import locate

    src, docs = corpus
    bucket = s3.bucket()
    locate(f"s3://{bucket}/in/c.bin").upload(src)
    os.makedirs(tmp_path / "cluster")
    c = Cluster(str(tmp_path / "cluster"), private=True)
    try:
        c.start()
        uri = f"s3://{bucket}/out"
        opts = [f"--storage-option={k}={v}" for k, v in s3.options.items()]
        proc = subprocess.Popen(
            [
                os.path.join(BIN, "fgram"),
                "build",
                uri,
                f"s3://{bucket}/in",
                "--master",
                c.url,
                *ARGS,
                *opts,
            ],
            env={k: v for k, v in _env().items() if not k.startswith("AWS_")},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=str(tmp_path),
        )
        fs, work = s3.filesystem(), f"{bucket}/.out.fgram-staging/_work/pass3"
        deadline = time.time() + 300
        while not any(n.endswith(".done.json") for n in objects(fs, work)):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.time() < deadline, "pass 3 never started"
            time.sleep(0.05)
        c.kill(c.workers[0])  # mid-job: pass 3 is counting
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert c.alive_workers() == 1
        assert remote_result(uri) == _local(spark, src, tmp_path / "l") == select(docs, 4, 5, 3000)
        assert objects(fs, f"{bucket}/.out.fgram-staging") == []  # the work is cleaned up
        _other_writers_on_the_store(c, bucket, uri, src, docs, opts, tmp_path)
    finally:
        c.stop()


def _other_writers_on_the_store(c, bucket, uri, src, docs, opts, tmp_path):
    """annotate, embed and refresh on the same cluster (nothing shared), outputs on S3:
    each equals what local mode writes locally."""
    from helpers import remote_result

    from fgram.jobs.annotate import run_annotate
    from fgram.jobs.embed import run_embed
    from fgram.pipeline.config.commands import AnnotateConfig, EmbedConfig
    from fgram.pipeline.tables.embed import FgramStore
    from fgram.pipeline.tables.index import write_index
    from fgram.pipeline.tables.tags import training_sequences

    env = {k: v for k, v in _env().items() if not k.startswith("AWS_")}

    def fgram(*args):
        res = subprocess.run(
            [os.path.join(BIN, "fgram"), *args, "--master", c.url, *opts],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=str(tmp_path),
        )
        assert res.returncode == 0, res.stderr[-3000:]

    write_index(uri)
    local = str(tmp_path / "l")
    write_index(local)
    fgram(
        "annotate",
        uri,
        f"s3://{bucket}/in",
        "-o",
        f"s3://{bucket}/tags",
        "--dtype",
        "uint16",
        "--doc-sep",
        "0",
        "--unit-tokens",
        "25000",
    )
    run_annotate(
        AnnotateConfig(
            table=local,
            inputs=[src],
            output=str(tmp_path / "tags"),
            doc_sep=0,
            engine="local",
            unit_tokens=25000,
        )
    )
    got = [s for w in training_sequences(f"s3://{bucket}/tags", 999) for s in w]
    want = [s for w in training_sequences(str(tmp_path / "tags"), 999) for s in w]
    assert len(got) == len(want) > 3 and all(np.array_equal(a, b) for a, b in zip(got, want))
    fgram("embed", uri, "--model", "fgram.pipeline.models:hashed", "--chunk-rows", "1000")
    run_embed(
        EmbedConfig(
            table=local, model="fgram.pipeline.models:hashed", chunk_rows=1000, engine="local"
        )
    )
    assert np.array_equal(FgramStore.open(uri).matrix, FgramStore.open(local).matrix)
    fgram("refresh", f"s3://{bucket}/versions", f"s3://{bucket}/in", *ARGS)
    assert remote_result(f"s3://{bucket}/versions") == select(docs, 4, 5, 3000)
