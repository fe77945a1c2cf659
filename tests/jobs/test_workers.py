"""The local engine's workers: the first failed task ends a job at once, every time,
also while the other workers are sending results, on forked and clean workers alike;
a worker that dies is an error, not a hang; the next job runs."""

import os
import pickle
import signal
import time
from multiprocessing.connection import Connection

import numpy as np
import pytest

import fgram.jobs.executors as executors
from fgram.jobs.executors import LocalExecutor
from fgram.jobs.workers import WorkerDied


def _big_or_fail(i):
    if i == 3:
        raise RuntimeError("task 3 fails")
    return np.zeros(2**18)  # 2 MiB answers in flight while task 3 fails


def _killed(i):
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.1)
    return i


@pytest.fixture
def bounded():
    """A hang fails the test instead of stalling the suite."""

    def stop(*_):
        raise TimeoutError("the job did not end")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("clean", [False, True], ids=["forked", "clean"])
def test_a_failed_task_ends_the_job_at_once_every_time(monkeypatch, bounded, clean):
    monkeypatch.setattr(executors, "object_store_used", lambda: clean)
    ex = LocalExecutor(2)
    for _ in range(15):
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="task 3 fails"):
            ex.map(8, _big_or_fail)
        assert time.monotonic() - t0 < 30
    assert ex.map(4, lambda i: i * i) == [0, 1, 4, 9]  # and the next job runs


@pytest.mark.parametrize("clean", [False, True], ids=["forked", "clean"])
def test_a_dead_worker_is_an_error(monkeypatch, bounded, clean):
    monkeypatch.setattr(executors, "object_store_used", lambda: clean)
    with pytest.raises(WorkerDied, match="ended without an answer .*-9"):
        LocalExecutor(2).map(4, _killed)
    assert LocalExecutor(2).map(3, lambda i: -i) == [0, -1, -2]


def _env_of(i):
    return os.environ.get("FGRAM_TEST_SETTING")


@pytest.mark.parametrize("clean", [False, True], ids=["forked", "clean"])
def test_workers_see_the_environment_of_the_job_not_of_their_start(monkeypatch, bounded, clean):
    """An endpoint or credentials set between two jobs of one process reach the second
    job's workers (clean workers come from a server started with the first job)."""
    monkeypatch.setattr(executors, "object_store_used", lambda: clean)
    monkeypatch.setenv("FGRAM_TEST_SETTING", "first")
    assert LocalExecutor(2).map(3, _env_of) == ["first"] * 3
    monkeypatch.setenv("FGRAM_TEST_SETTING", "second")
    assert LocalExecutor(2).map(3, _env_of) == ["second"] * 3


def test_clean_workers_get_a_job_s_function_once_each(monkeypatch, bounded):
    """The clean workers' tasks carry the job's pickled function (cloudpickle, by value)
    to each worker once, not with every task: 40 tasks of a function holding 4 MiB send
    two copies of it through the pipes (two workers), not forty."""
    monkeypatch.setattr(executors, "object_store_used", lambda: True)
    sent: list[int] = []
    send = Connection.send

    def counted(self, obj):
        sent.append(len(pickle.dumps(obj)))
        send(self, obj)

    monkeypatch.setattr(Connection, "send", counted)
    big = np.arange(1 << 19)  # 4 MiB in the function's closure
    assert LocalExecutor(2).map(40, lambda i: int(big[i])) == list(range(40))
    assert len(sent) == 40 and 2 * big.nbytes <= sum(sent) < 3 * big.nbytes


def test_a_small_job_runs_in_the_driver_unless_processes_are_asked_for():
    cores = os.cpu_count() or 1
    small, big = executors.SMALL_JOB_TOKENS - 1, executors.SMALL_JOB_TOKENS
    for tokens, asked, want in [(small, None, 1), (big, None, cores), (small, 2, 2)]:
        ex = LocalExecutor(asked)
        ex.fit(tokens)
        assert ex.parallelism == want, (tokens, asked)
    seen = LocalExecutor()
    seen.fit(small)
    assert seen.map(3, lambda i: os.getpid()) == [os.getpid()] * 3  # no fork
