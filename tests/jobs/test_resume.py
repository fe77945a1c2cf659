"""Failure and resume: a killed run continues with --resume; leftovers never mix in; one
writer per output (a lock that a dead run does not keep)."""

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import build, interrupted_run, random_corpus, result, said, wait_for_files, write_bin
from oracle import select, split_flat

from fgram.pipeline.errors import LockedError, OutputError
from fgram.pipeline.io.publish import here, lock_path, staging_path

pytestmark = pytest.mark.spark

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")


def _corpus(tmp_path) -> tuple[str, list[list[int]]]:
    """~300K tokens of repeated phrases: many small units, so a pass takes a while."""
    path = str(tmp_path / "c.bin")
    subprocess.run(
        [
            FGRAM,
            "synth",
            "-o",
            str(tmp_path / "syn"),
            "--tokens",
            "300000",
            "--vocab",
            "300",
            "--format",
            "bin",
        ],
        check=True,
        capture_output=True,
    )
    os.rename(glob.glob(str(tmp_path / "syn" / "*.bin"))[0], path)
    return path, split_flat(np.fromfile(path, dtype=np.uint16).tolist(), 0)


def _cmd(src, out, *extra):
    return [
        FGRAM,
        "build",
        str(out),
        src,
        "--dtype",
        "uint16",
        "--doc-sep",
        "0",
        "--size",
        "3000",
        "-K",
        "4",
        "--unit-tokens",
        "6000",
        "--master",
        "local[2]",
        *extra,
    ]


@pytest.mark.slow
def test_sigkill_in_pass_3_then_resume_gives_the_uninterrupted_table(spark, tmp_path):
    src, docs = _corpus(tmp_path)
    out = tmp_path / "o"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.Popen(
        _cmd(src, out),
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pass3 = os.path.join(staging_path(here(str(out))), "_work", "pass3")
    try:
        wait_for_files(os.path.join(pass3, "count", "*.done.json"), proc, 240, "pass 3")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
        proc.wait()
    assert not out.exists()  # nothing half-published
    state = json.load(open(os.path.join(staging_path(here(str(out))), "_work", "state.json")))
    assert state["next"] == 3  # pass 2 completed, 3 did not
    assert os.path.exists(lock_path(here(str(out))))  # the dead run's lock is left...

    res = subprocess.run(
        _cmd(src, out, "--resume"), env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]  # ...and taken over
    m = json.load(open(out / "manifest.json"))
    assert m["resumed"]["from_pass"] == 3 and m["resumed"]["units_counted_before"] >= 1
    build(
        spark,
        [src],
        tmp_path / "ref",
        dtype="uint16",
        doc_sep=0,
        size=3000,
        max_len=4,
        unit_tokens=6000,
    )
    assert result(out) == result(tmp_path / "ref") == select(docs, 4, 5, 3000)
    assert not os.path.exists(staging_path(here(str(out)))) and not os.path.exists(
        lock_path(here(str(out)))
    )


def _leftover(out, run_json=None):
    work = os.path.join(staging_path(here(str(out))), "_work")
    os.makedirs(os.path.join(work, "pass2", "count"))
    with open(os.path.join(work, "pass2", "count", "00000000.done.json"), "w") as f:
        json.dump({"bogus": True}, f)  # would poison the counts if it were reused
    if run_json is not None:
        with open(os.path.join(work, "run.json"), "w") as f:
            json.dump(run_json, f)


def test_leftovers_of_a_crashed_run_are_removed_without_resume(spark, tmp_path):
    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2]] * 3
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = tmp_path / "o"
    _leftover(out)
    build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2)
    assert result(out) == select(
        split_flat(np.fromfile(tmp_path / "a.bin", np.uint16).tolist(), 0), 5, 2, None
    )
    assert not os.path.exists(staging_path(here(str(out))))


def test_resume_refuses_another_runs_work(spark, tmp_path):
    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2]] * 3
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = tmp_path / "o"
    _leftover(out, run_json={"config": {"min_count": 99}, "inputs": []})
    with pytest.raises(
        OutputError, match="cannot resume: the unfinished run there had other inputs"
    ):
        build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2, resume=True)
    assert os.path.exists(staging_path(here(str(out))))  # its work is not destroyed either
    build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2)  # without --resume: fresh
    assert (out / "_SUCCESS").exists()


def _write_lock(out, host, pid, age=0.0):
    path = lock_path(here(str(out)))
    with open(path, "w") as f:
        json.dump({"host": host, "pid": pid, "started": time.time() - age}, f)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_second_run_on_the_same_output_is_refused(spark, tmp_path):
    write_bin(str(tmp_path / "a.bin"), [[1, 2, 1, 2, 1, 2]], sep=0)
    out = tmp_path / "o"
    _write_lock(out, socket.gethostname(), os.getpid())  # a live run on this host
    with pytest.raises(LockedError, match=f"pid {os.getpid()} on"):
        build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2)
    assert not out.exists()
    _write_lock(out, "another-host", 1, age=5)  # alive elsewhere: recent heartbeat
    with pytest.raises(LockedError):
        build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2)


@pytest.mark.parametrize("holder", ["dead pid here", "silent other host"])
def test_a_stale_lock_is_taken_over(spark, tmp_path, holder):
    write_bin(str(tmp_path / "a.bin"), [[1, 2, 1, 2, 1, 2]], sep=0)
    out = tmp_path / "o"
    if holder == "dead pid here":
        _write_lock(out, socket.gethostname(), _dead_pid())
    else:
        _write_lock(out, "another-host", 1, age=3600)
    build(spark, [tmp_path / "a.bin"], out, doc_sep=0, min_count=2)
    assert (out / "_SUCCESS").exists() and not os.path.exists(lock_path(here(str(out))))


@pytest.mark.parametrize("fmt", ["bin", "parquet"])
def test_a_shard_changed_in_place_is_detected(spark, tmp_path, fmt):
    """Same size, same mtime, other content: the fingerprint (Parquet footer / sampled
    blocks) differs, so --resume refuses the old run's work."""
    from helpers import write_parquet

    from fgram.jobs import runs as job
    from fgram.pipeline.config.commands import BuildConfig
    from fgram.pipeline.formats.inputs import plan_shards

    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2]] * 3
    if fmt == "bin":
        src = write_bin(str(tmp_path / "a.bin"), docs, sep=0)
        other = [[3, 2, 1, 3, 2, 1], [2, 3, 1, 2]] * 3  # same length, other tokens
        kw = {"doc_sep": 0}
    else:
        src = write_parquet(str(tmp_path / "a.parquet"), docs)
        other = [[t + 1 for t in d] for d in docs]  # encodes to the same size
        kw = {}
    out = tmp_path / "o"
    cfg = BuildConfig([src], str(out), min_count=2, **kw)
    before = job.run_fingerprint(cfg, plan_shards(cfg.inputs, cfg.read_options()))
    stat = os.stat(src)
    (write_bin(src, other, sep=0) if fmt == "bin" else write_parquet(src, other))
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(src).st_size == stat.st_size and os.stat(src).st_mtime_ns == stat.st_mtime_ns
    _leftover(out, run_json=before)
    with pytest.raises(OutputError, match="other inputs"):
        build(spark, [src], out, min_count=2, resume=True, **kw)


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_no_stray_process_then_resume(spark, tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C: one line that says what
    is kept and how to resume, exit status 130, no traceback, every process gone."""
    src, docs = _corpus(tmp_path)
    out = tmp_path / "o"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    pass3 = os.path.join(staging_path(here(str(out))), "_work", "pass3")
    proc, err = interrupted_run(
        _cmd(src, out),
        env,
        os.path.join(pass3, "count", "*.done.json"),
        "pass 3",
        lambda proc: os.killpg(proc.pid, signal.SIGINT),
        stdout=subprocess.PIPE,
    )
    assert proc.returncode == 130, err[-2000:]
    assert said(err) == [
        f"fgram: interrupted; the completed passes are kept in "
        f"{staging_path(here(str(out)))}: rerun with --resume to continue"
    ]
    deadline = time.time() + 30
    while True:  # the JVM and the Python workers go too
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.time() < deadline, "processes of the interrupted run are still alive"
        time.sleep(0.1)
    res = subprocess.run(
        _cmd(src, out, "--resume"), env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and said(res.stderr) == [], res.stderr[-2000:]
    assert result(out) == select(docs, 4, 5, 3000)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_failed_publish_then_resume_keeps_every_pass(spark, tmp_path, monkeypatch, engine):
    """The table written, then publishing fails (a store gone mid-commit, a full disk):
    the passes stay in the staging folder, and --resume publishes without counting a
    unit again."""
    from fgram.jobs import sequence as driver  # every job publishes there

    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2], [3, 1, 2, 3, 1]] * 4
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = tmp_path / "o"
    real = driver.finish

    def fails(*args, **kwargs):
        raise OSError("connection reset while publishing")

    monkeypatch.setattr(driver, "finish", fails)
    kw = dict(doc_sep=0, min_count=2, max_len=4, unit_tokens=8, engine=engine)
    with pytest.raises(OSError, match="while publishing") as caught:
        build(spark, [tmp_path / "a.bin"], out, **kw)
    assert "rerun with --resume" in caught.value.fgram_kept
    assert not out.exists()
    work = os.path.join(staging_path(here(str(out))), "_work")
    assert json.load(open(os.path.join(work, "state.json")))["next"] == 5  # every pass
    monkeypatch.setattr(driver, "finish", real)
    m = build(spark, [tmp_path / "a.bin"], out, resume=True, **kw)
    assert m["resumed"] == {"from_pass": 5, "units_counted_before": 0}
    assert result(out) == select(docs, 4, 2, None)
    assert sorted(os.listdir(out)) == ["_SUCCESS", "fgrams", "manifest.json"]
    assert not os.path.exists(staging_path(here(str(out))))


@pytest.mark.parametrize(
    "k,damage", [(2, "plus1"), (3, "plus1"), (2, "swapped"), (2, "moved"), (3, "moved")]
)
def test_a_counted_unit_changed_after_a_crash_is_found_on_resume(
    spark, tmp_path, monkeypatch, capfd, k, damage
):
    """A killed run's unit files altered before --resume (a disk's damage, a stray
    write: +1 on counts; two 64-bit words swapped; +1000 on one word and -1000 on
    another, which a sum of words does not see): the marker's XXH3 finds it. The unit
    is counted again
    where what it was counted from is still there (pass 2: the input), and the table is
    the one an uninterrupted run makes; else (pass 3: pass 2's files of the unit went
    once it was counted) one line naming the file, and a run without --resume."""
    import fgram.jobs.table.driver as driver

    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 4], [3, 1, 2, 3, 1, 4]] * 5
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = tmp_path / "o"
    real = driver.BuildPasses.done

    def crash_after_counting(self, at, threshold, record):
        if at == k:
            raise RuntimeError("killed")
        real(self, at, threshold, record)

    monkeypatch.setattr(driver.BuildPasses, "done", crash_after_counting)
    kw = dict(doc_sep=0, min_count=2, max_len=4, unit_tokens=16, engine="local")
    with pytest.raises(RuntimeError, match="killed"):
        build(spark, [tmp_path / "a.bin"], out, **kw)
    monkeypatch.setattr(driver.BuildPasses, "done", real)
    folder = os.path.join(staging_path(here(str(out))), "_work", f"pass{k}")
    what = "keys" if damage == "swapped" else "counts"  # keys: distinct words to swap
    changed = sorted(glob.glob(os.path.join(folder, f"unit-*.{what}.npy")))[:2]
    assert changed, os.listdir(folder)
    for path in changed:
        counts = np.load(path)  # (or keys)
        words = counts[: len(counts) // 2 * 2].view(np.uint64)  # whole 64-bit words
        assert damage == "plus1" or len(words) >= 2, counts
        if damage == "plus1":
            counts[: max(1, len(counts) // 2)] += 1
        elif damage == "swapped":  # two keys' words: the same sum of words
            words[[0, 1]] = words[[1, 0]]
        else:  # moved: the same total of words
            words[0] += np.uint64(1000)
            words[-1] -= np.uint64(1000)
        np.save(path, counts)
    capfd.readouterr()
    if k == 3:
        with pytest.raises(OutputError, match="rerun without --resume") as caught:
            build(spark, [tmp_path / "a.bin"], out, resume=True, **kw)
        assert str(caught.value).split(":")[0] in changed
        build(spark, [tmp_path / "a.bin"], out, **kw)
    else:
        m = build(spark, [tmp_path / "a.bin"], out, resume=True, **kw)
        assert m["resumed"]["from_pass"] == k
        err = capfd.readouterr().err
        for path in changed:
            assert f"{path}: not as it was written" in err, err
    assert result(out) == select(docs, 4, 2, None)


def test_a_kept_pass_file_changed_after_a_crash_is_found_on_resume(
    spark, tmp_path, monkeypatch, capfd
):
    """A killed run's completed passes: their kept files (frequent n-grams, counts)
    altered before --resume are found by the records the state holds; the passes are
    counted again, and the table is the one an uninterrupted run makes."""
    import fgram.jobs.table.driver as driver

    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 4], [3, 1, 2, 3, 1, 4]] * 5
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    out = tmp_path / "o"
    real = driver.BuildPasses.done

    def crash_after_pass_3(self, at, threshold, record):
        real(self, at, threshold, record)
        if at == 3:
            raise RuntimeError("killed")

    monkeypatch.setattr(driver.BuildPasses, "done", crash_after_pass_3)
    kw = dict(doc_sep=0, min_count=2, max_len=4, unit_tokens=16, engine="local")
    with pytest.raises(RuntimeError, match="killed"):
        build(spark, [tmp_path / "a.bin"], out, **kw)
    monkeypatch.setattr(driver.BuildPasses, "done", real)
    work = os.path.join(staging_path(here(str(out))), "_work")
    assert json.load(open(os.path.join(work, "state.json")))["next"] == 4
    path = sorted(glob.glob(os.path.join(work, "pass2", "frequent-*.counts.npy")))[0]
    counts = np.load(path)
    counts[:] += 1
    np.save(path, counts)
    capfd.readouterr()
    m = build(spark, [tmp_path / "a.bin"], out, resume=True, **kw)
    assert f"{path}: not as it was written; the passes are counted again" in capfd.readouterr().err
    assert m["resumed"]["from_pass"] == 2
    assert result(out) == select(docs, 4, 2, None)


def test_resume_takes_the_same_input_spelled_otherwise(spark, tmp_path, monkeypatch):
    """A rerun names the input by another path to the same file (absolute instead of
    relative): it is the same run, and --resume continues it."""
    import fgram.jobs.table.driver as driver

    docs = [[1, 2, 3, 1, 2, 3, 4], [2, 3, 1, 2, 4]] * 5
    write_bin(str(tmp_path / "a.bin"), docs, sep=0)
    monkeypatch.chdir(tmp_path)
    real = driver.BuildPasses.done

    def crash(self, k, threshold, record):
        if k == 3:
            raise RuntimeError("killed")
        real(self, k, threshold, record)

    monkeypatch.setattr(driver.BuildPasses, "done", crash)
    kw = dict(doc_sep=0, min_count=2, max_len=4, unit_tokens=16, engine="local")
    with pytest.raises(RuntimeError, match="killed"):
        build(spark, ["a.bin"], tmp_path / "o", **kw)
    monkeypatch.setattr(driver.BuildPasses, "done", real)
    m = build(spark, [str(tmp_path / "a.bin")], tmp_path / "o", resume=True, **kw)
    assert m["resumed"]["from_pass"] == 3
    assert result(tmp_path / "o") == select(docs, 4, 2, None)


def test_on_spark_a_pass_over_its_work_budget_stops_then_resumes(spark, tmp_path):
    """--work-budget on Spark, whose tasks report when their stage ends (the driver's
    head-start tasks as each finishes): the pass stops over the budget, and the resume
    on Spark gives the oracle's table (`test_work_budget.py`: the local engine)."""
    from fgram.jobs.budget import WORK_BYTES_PER_TOKEN, OverBudget

    src, docs = random_corpus(str(tmp_path / "c.bin"), 100_000)
    kw = {"dtype": "uint16", "doc_sep": 0, "max_len": 3, "size": 500, "unit_tokens": 20_000}
    budget = int(100_000 * WORK_BYTES_PER_TOKEN * 1.5)  # over the estimate: the run starts
    with pytest.raises(OverBudget, match=r"^pass 2: .* over --work-budget "):
        build(spark, [src], tmp_path / "t", work_budget=budget, **kw)
    resumed = build(spark, [src], tmp_path / "t", resume=True, **kw)
    assert resumed["resumed"]["units_counted_before"] > 0
    assert result(tmp_path / "t") == select(docs, 3, 5, 500)


def test_on_the_join_path_the_budget_holds_what_earlier_passes_keep_on_disk(
    spark, tmp_path, monkeypatch
):
    """With lookups by join (no broadcast), a pass's answers go once the pass after it is
    done: what the budget counts as kept when a pass starts is what is on disk then (the
    kept sets, the answers still needed, the pass before's merged ranges)."""
    from fgram.jobs.table import driver
    from fgram.pipeline.io import workdir

    def at_once(_, paths):  # the sweep done before the next pass starts, not beside it
        for path in paths:
            workdir.remove(path)

    monkeypatch.setattr(workdir.Sweeper, "sweep", at_once)
    work = tmp_path / ".t.fgram-staging" / "_work"
    seen, real = [], driver.PassBudget

    def watching(budget, k, tokens, held):
        on_disk = sum(
            np.load(work / f"pass{j}" / name, mmap_mode="r").nbytes
            for j in range(2, k)
            for name in os.listdir(work / f"pass{j}")
            if name.startswith(("frequent-", "answers-", "merged-")) and name.endswith(".npy")
        )
        seen.append((k, held, on_disk))
        return real(budget, k, tokens, held)

    monkeypatch.setattr(driver, "PassBudget", watching)
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 40, size=int(rng.integers(20, 300))).tolist() for _ in range(150)]
    src = write_bin(str(tmp_path / "c.bin"), docs, sep=0)
    kw = {"dtype": "uint16", "doc_sep": 0, "max_len": 5, "min_count": 2, "unit_tokens": 5_000}
    made = build(spark, [src], tmp_path / "t", work_budget=10**9, broadcast_budget=0, **kw)
    assert {p["lookup"] for p in made["passes"][:-1]} == {"join"}
    assert [k for k, _, _ in seen] == [2, 3, 4, 5]
    assert [held for _, held, _ in seen] == [on_disk for _, _, on_disk in seen]
    assert result(tmp_path / "t") == select(docs, 5, 2, None)
