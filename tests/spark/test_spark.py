"""The session builder: what a fresh machine's driver JVM gets."""

import os
import subprocess
import sys

import pytest

from fgram.spark import session as sp


def test_class_archive_written_once_then_used(monkeypatch, tmp_path):
    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path))
    final = sp.class_archive()
    assert os.path.dirname(final) == str(tmp_path) and final.endswith(".jsa")
    orphan = f"{final}.999999999.tmp"  # a killed run's: no such process
    mine = f"{final}.{os.getpid()}.tmp"  # a live run's
    for path in (orphan, mine):
        open(path, "w").close()
    settings = {sp.JAVA_OPTS: "-XX:+UseSerialGC"}
    assert sp.with_class_archive(settings) == final
    assert f"-XX:ArchiveClassesAtExit={mine}" in settings[sp.JAVA_OPTS]
    assert settings[sp.JAVA_OPTS].startswith("-XX:+UseSerialGC ")
    assert not os.path.exists(orphan) and os.path.exists(mine)
    open(final, "w").close()
    settings = {sp.JAVA_OPTS: ""}
    assert sp.with_class_archive(settings) is None
    assert f"-XX:SharedArchiveFile={final}" in settings[sp.JAVA_OPTS]
    os.remove(final)
    open(final + ".none", "w").close()  # this JVM could not write one: no retry
    settings = {sp.JAVA_OPTS: ""}
    assert sp.with_class_archive(settings) is None and settings[sp.JAVA_OPTS] == ""


def test_only_the_most_recently_used_archives_are_kept(monkeypatch, tmp_path):
    """Each JDK / Spark install (each new virtual environment) has its own ~180 MB
    archive: before another is written, all but the KEEP_ARCHIVES most recently used
    others are deleted; using one marks it used."""
    monkeypatch.setenv("FGRAM_CACHE_DIR", str(tmp_path))
    final = sp.class_archive()
    names = [f"spark-classes-{i:016x}.jsa" for i in range(sp.KEEP_ARCHIVES + 2)]
    for age, name in enumerate(names):
        path = tmp_path / name
        path.write_bytes(b"x")
        os.utime(path, (1e9 - age * 1000, 1e9 - age * 1000))  # names[0] the newest
    open(tmp_path / "other.txt", "w").close()
    os.rename(tmp_path / names[-1], final)  # the oldest is this install's: using it ...
    assert sp.with_class_archive({sp.JAVA_OPTS: ""}) is None
    assert os.stat(final).st_mtime > 1e9  # ... makes it the most recently used
    os.remove(final)  # gone: the next run writes it afresh
    assert sp.with_class_archive({sp.JAVA_OPTS: ""}) == final
    left = sorted(n for n in os.listdir(tmp_path) if n.endswith(".jsa"))
    assert left == sorted(names[: sp.KEEP_ARCHIVES])
    assert os.path.exists(tmp_path / "other.txt")


@pytest.mark.slow
def test_first_context_publishes_the_archive_and_the_next_one_uses_it(tmp_path):
    """Two fresh processes: the first launches its JVM recording the classes it loads
    and publishes the archive at exit; the second starts from it; both run a job."""
    script = (
        "from fgram.spark import session as sp\n"
        "sc = sp.get_context('local[2]')\n"
        "print(sc.getConf().get('spark.driver.extraJavaOptions'))\n"
        "print('sum', sc.parallelize(range(5), 2).sum())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    env["FGRAM_CACHE_DIR"] = str(tmp_path / "cache")
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        assert "sum 10" in run.stdout
    names = os.listdir(tmp_path / "cache")
    assert len(names) == 1 and names[0].endswith(".jsa"), names  # no .tmp left behind
    archive = str(tmp_path / "cache" / names[0])
    assert os.path.getsize(archive) > 1_000_000
    assert "-XX:ArchiveClassesAtExit=" in runs[0].stdout
    assert f"-XX:SharedArchiveFile={archive}" in runs[1].stdout


def test_wait_idle_outlasts_the_tasks_of_a_cancelled_job(spark):
    """A cancelled job ends before its tasks do (PySpark kills their workers seconds
    later); `wait_idle` returns only when none runs, so a context stopped after it
    cuts no task off (Spark's ERROR "Block broadcast_0 does not exist" at exit)."""
    import threading
    import time

    from fgram.jobs.executors import SparkExecutor

    ex = SparkExecutor(spark.sparkContext)
    assert ex.wait_idle(0)
    ended = {}

    def job():
        ex.sc.setJobGroup("slow", "tasks that outlast their job", interruptOnCancel=True)
        try:
            ex.sc.parallelize(range(2), 2).map(lambda i: time.sleep(60)).collect()
        except Exception as exc:  # noqa: BLE001 - the cancellation
            ended["exc"] = exc

    thread = threading.Thread(target=job, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while ex.wait_idle(0) and time.time() < deadline:  # until the tasks run
        time.sleep(0.05)
    assert not ex.wait_idle(0.1)
    ex.sc.cancelJobGroup("slow")
    thread.join(30)
    assert "exc" in ended
    assert not ex.wait_idle(0)  # the job is over, its tasks are not
    t0 = time.time()
    assert ex.wait_idle(30)
    assert time.time() - t0 < 30


def test_local_workers_import_the_installed_pyspark_not_the_source_zip(spark):
    """Spark puts pyspark's source zip first on the workers' path; compiling it at every
    daemon and worker start cost ~1 s of CPU. Local mode's daemon imports the installed,
    byte-compiled pyspark (the driver's own)."""
    import pyspark

    def where(_):
        import pyspark as p

        return p.__file__

    got = spark.sparkContext.parallelize(range(2), 2).map(where).collect()
    assert set(got) == {pyspark.__file__} and ".zip" not in pyspark.__file__, got


def test_the_daemon_module_only_where_fgram_launches_local_spark(monkeypatch):
    """Under spark-submit the package may reach the workers only as --py-files, which
    the daemon (started before any task) cannot import: pyspark's own daemon there."""
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    assert sp.spark_settings(None, None)[1][sp.DAEMON] == "fgram.spark.daemon"
    assert sp.DAEMON not in sp.spark_settings("spark://127.0.0.1:7077", None)[1]
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--conf spark.master=local[2] pyspark-shell")
    assert sp.DAEMON not in sp.spark_settings("local[2]", None)[1]


def test_the_master_of_a_context_still_being_made(monkeypatch):
    """A context another thread is still making has no master yet (SparkContext's
    __init__ registers itself first): its master is read as the one it is made with,
    never an AttributeError."""
    from types import SimpleNamespace

    from pyspark import SparkContext

    from fgram.spark.session import effective_master

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.delenv("SPARK_ENV_LOADED", raising=False)
    monkeypatch.setattr(SparkContext, "_active_spark_context", SimpleNamespace())
    assert effective_master(None) == "local[*]"
    assert effective_master("spark://h:7077") == "spark://h:7077"
    running = SimpleNamespace(master="spark://h:7077")
    monkeypatch.setattr(SparkContext, "_active_spark_context", running)
    assert effective_master(None) == "spark://h:7077"


_RESET_WORKER = """
import socket, struct, sys, time
from pyspark import daemon
from fgram.spark.daemon import install
if sys.argv[1] == "fgram":
    install()
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
jvm = socket.create_connection(srv.getsockname())
sock, _ = srv.accept()
jvm.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
jvm.close()  # a reset, as when the JVM drops a cancelled task's worker
time.sleep(0.2)
print("exit", daemon.worker(sock, True))
"""


def test_a_worker_whose_jvm_socket_was_reset_says_nothing():
    """pyspark's own daemon prints a traceback when the JVM dropped a task's socket
    (a cancelled stage); the daemon fgram runs ends that worker without a word."""
    run = [sys.executable, "-c", _RESET_WORKER]
    plain = subprocess.run([*run, "plain"], capture_output=True, text=True, timeout=120)
    assert "Traceback" in plain.stderr and "BrokenPipeError" in plain.stderr  # pyspark's
    ours = subprocess.run([*run, "fgram"], capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0 and ours.stdout.strip() == "exit 1"
    assert ours.stderr == ""


_MANAGED = """
import json, sys
import numpy as np
from pyspark.sql import SparkSession
import fgram

# a managed platform's session (Databricks, EMR notebooks): made by the caller, with its
# own app name, parallelism and settings, before fgram is called
spark = (
    SparkSession.builder.master("local[3]").appName("user-notebook")
    .config("spark.default.parallelism", "5").config("spark.sql.shuffle.partitions", "7")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.user.setting", "kept").getOrCreate()
)
spark.range(1).count()  # the notebook has run SQL (Spark then adds its warehouse dir)
before = (sorted(spark.sparkContext.getConf().getAll()), sorted(spark.conf.getAll.items()))
root, shard = sys.argv[1], sys.argv[2]
docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 3], [5, 1, 2, 3, 1, 2]] * 5
flat = []
for d in docs:
    flat += d + [0]
np.asarray(flat, dtype=np.uint16).tofile(shard)
built = fgram.build(root + "/t", [shard], spark=spark, doc_sep=0, min_count=2)
refreshed = fgram.refresh(root + "/r", [shard], spark=spark, doc_sep=0, min_count=2)
again = fgram.refresh(root + "/r", [shard], spark=spark)  # its options remembered
after = (sorted(spark.sparkContext.getConf().getAll()), sorted(spark.conf.getAll.items()))
print(json.dumps({
    "fgrams": [built["fgrams"], refreshed["manifest"]["fgrams"]],
    "unchanged": again["built"] is False,
    "same_conf": before == after,
    "alive": spark.range(10).count(),
    "app": spark.sparkContext.appName,
    "parallelism": spark.sparkContext.defaultParallelism,
    "same_session": SparkSession.getActiveSession() is spark,
}))
spark.stop()
"""


def test_build_and_refresh_inside_a_session_the_caller_made(tmp_path):
    """fgram.build and fgram.refresh given an active SparkSession (its own app name,
    parallelism and settings) run in it, leave it running, and leave its settings as
    they were."""
    import json

    from helpers import result
    from oracle import select

    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}  # the platform's workers' Python
    res = subprocess.run(
        [sys.executable, "-c", _MANAGED, str(tmp_path), str(tmp_path / "a.bin")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["same_conf"] and got["alive"] == 10 and got["same_session"]
    assert got["app"] == "user-notebook" and got["parallelism"] == 5
    assert got["unchanged"]
    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 3], [5, 1, 2, 3, 1, 2]] * 5
    expect = select(docs, 5, 2, None)
    assert result(tmp_path / "t") == result(tmp_path / "r" / "current") == expect
    assert got["fgrams"] == [len(expect)] * 2


def test_the_accumulator_servers_traceback_is_quiet_after_a_ctrl_c(spark, capsys):
    """A Ctrl-C's shutdown closes the JVM's accumulator connection mid-update; PySpark's
    server would print that traceback after the command's one line: muted with the JVM."""
    from fgram.spark import session as ss

    server = spark.sparkContext._accumulatorServer
    assert server.fgram_quiet
    try:
        raise EOFError
    except EOFError:
        ss.MUTED.append(True)
        try:
            server.handle_error(None, ("127.0.0.1", 1))
        finally:
            ss.MUTED.clear()
        assert capsys.readouterr().err == ""
        server.handle_error(None, ("127.0.0.1", 1))  # not muted: said, as PySpark does
    assert "EOFError" in capsys.readouterr().err
