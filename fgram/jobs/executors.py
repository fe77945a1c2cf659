"""Who runs a job's tasks (after datatrove: one executor decides where they run).

A job is ``n`` independent tasks ``fn(0) .. fn(n-1)`` that read and write
files and return small summaries. ``SparkExecutor`` runs them as one Spark job
(scheduling, retries, any cluster); ``LocalExecutor`` runs the same functions
in a pool of forked processes, without Spark, to measure what Spark costs.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any, NoReturn

from fgram.jobs.progress import PROGRESS
from fgram.jobs.workers import Workers, serve
from fgram.pipeline.errors import (
    ClusterUnavailable,
    FgramError,
    WorkerSetupError,
    from_marker_text,
    task_failure,
)
from fgram.pipeline.io.storage import object_store_used

Watch = Callable[[object], None] | None  # shown each task's result in the driver (`map`)


def as_task(fn):
    """Wrap a task body so our errors survive a trip through Spark as a marker.

    The wrapper keeps the body's module and qualified name, so a task closure
    pickles it by reference (an import on the worker), never by value with
    the module's globals (the driver's caches and work arrays).
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FgramError as exc:
            raise RuntimeError(exc.marker_text()) from None

    return wrapper


def reraise(exc: BaseException) -> NoReturn:
    text = str(exc)
    err = from_marker_text(text)
    if err is not None:
        raise err from None
    _, missing = task_failure(text)
    if missing is not None:
        raise WorkerSetupError(
            f"a Spark worker cannot import what the task needs ({missing}): "
            f"install fgram and its dependencies where the executors run, "
            f"or ship the package with --py-files"
        ) from None
    raise exc


class Executor:
    """What a stage may ask of the executor it is given, rather than its name:
    ``warms_up`` (workers start in the background: a head start pays), ``remote`` (tasks
    may run on other machines, which reach only shared storage), ``shares_memory``
    (tasks read the driver's arrays through a fork or a pickle on this machine: no
    broadcast budget to respect)."""

    parallelism = 1
    warms_up = False
    remote = False
    shares_memory = False

    def map(
        self, n: int, fn, overlap: bool = False, progress: bool = False, watch: Watch = None
    ) -> list:
        """Run ``fn(0) .. fn(n-1)``; results in order. ``overlap`` says the tasks are
        idempotent and leave completion markers (see `HeadStart`); an executor that
        is up from the start has no use for it. ``progress``: report each finished
        task to `progress.PROGRESS` (the job's current stage counts them). ``watch``:
        called in the driver with each result as it comes (on Spark, once all are in);
        what it raises ends the stage, its tasks with it."""
        raise NotImplementedError

    def fit(self, tokens: int) -> None:
        """Fit the executor to a job of ``tokens`` input tokens, before its first task
        (nothing by default)."""

    def map_batched(self, n: int, fn) -> list:
        """``map`` for many small work items: at most 2 x parallelism tasks, task t
        running items t, t + tasks, t + 2 x tasks, ... in turn (a task launch costs
        tens of ms on Spark; a merge or keep item can take less). Dealt so, not in
        contiguous batches, the few large items a job lists first (a refresh's new
        units before its scans of old ones) go to different tasks. Results in item
        order."""
        tasks = min(n, 2 * self.parallelism)
        if tasks == n:
            return self.map(n, fn)
        out = self.map(tasks, lambda t: [fn(i) for i in range(t, n, tasks)])
        return [out[i % tasks][i // tasks] for i in range(n)]


EXECUTOR_WAIT = "spark.fgram.executorWait"  # seconds a job waits with no executor at all


class ExecutorGuard:
    """A job on a cluster with no executor left (every worker lost, or none came) would
    wait forever: this watch cancels it once there has been none for
    ``spark.fgram.executorWait`` seconds (default 120: a cluster scaling up from nothing
    brings its first), `error` the line to raise. Local mode is never watched."""

    def __init__(self, sc, every: float = 1.0):
        import threading

        self.sc, self.every = sc, every
        self.wait = float(sc.getConf().get(EXECUTOR_WAIT, "120"))
        self.watched = not str(sc.master).startswith("local")
        self.lost = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ExecutorGuard:
        if self.watched:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def executors(self) -> int:
        """Executors registered now (the driver's own entry apart)."""
        return int(self.sc._jsc.sc().getExecutorMemoryStatus().size()) - 1

    def _run(self) -> None:
        since = None
        while not self._done.wait(self.every):
            try:
                none = self.executors() <= 0
            except Exception:  # noqa: BLE001 - the context is stopping: nothing to watch
                return
            since = (since or time.time()) if none else None
            if since is not None and time.time() - since >= self.wait:
                self.lost = True
                self.sc.cancelAllJobs()
                return

    def error(self) -> ClusterUnavailable:
        return ClusterUnavailable(
            f"{self.sc.master}: no executor for {self.wait:g} s (every worker lost, or none "
            f"came; --conf {EXECUTOR_WAIT}=SECONDS waits longer)"
        )


class SparkExecutor(Executor):
    name = "spark"
    warms_up = True

    def __init__(self, spark_or_context):
        """A SparkSession, or a SparkContext (a session is then made on first use of `spark`)."""
        if hasattr(spark_or_context, "sparkContext"):
            self._spark, self.sc = spark_or_context, spark_or_context.sparkContext
        else:
            self._spark, self.sc = None, spark_or_context
        self.parallelism = max(2, self.sc.defaultParallelism)
        self.remote = not str(self.sc.master).startswith("local")

    @property
    def spark(self):
        if self._spark is None:
            from fgram.spark.session import session

            self._spark = session()
        return self._spark

    def map(
        self, n: int, fn, overlap: bool = False, progress: bool = False, watch: Watch = None
    ) -> list:
        if n == 0:
            return []
        watched = progress and PROGRESS.enabled
        if watched:
            self._watch()
        guard = ExecutorGuard(self.sc)
        try:
            with guard:
                out = self.sc.parallelize(range(n), n).map(fn).collect()
            if watch is not None:
                for r in out:
                    watch(r)
            return out
        except Exception as exc:  # noqa: BLE001 - recover our own error from the task failure
            if guard.lost:
                raise guard.error() from None
            reraise(exc)
        finally:
            if watched:
                PROGRESS.watch(None)
                self.sc.setLocalProperty("spark.jobGroup.id", None)
                PROGRESS.advance(n)

    def _watch(self) -> None:
        """This thread's next job in a job group of its own, whose finished tasks the
        progress display reads from the status tracker (no Python runs in the tasks)."""
        import uuid

        group = f"fgram-progress-{uuid.uuid4().hex[:8]}"
        self.sc.setJobGroup(group, "fgram", False)
        tracker = self.sc.statusTracker()

        def finished() -> int:
            done = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    s = tracker.getStageInfo(stage)
                    done += s.numCompletedTasks if s else 0
            return done

        PROGRESS.watch(finished)

    def wait_idle(self, limit: float) -> bool:
        """Wait until no task runs, e.g. those of a cancelled job, which end seconds
        after the job (PySpark kills their workers); one still running when the
        context stops finds its broadcast gone, and Spark logs an ERROR. A task
        leaves the scheduler's count when its end is reported, after its completion
        listeners ran (the status tracker's executor counts miss the driver's tasks
        in local mode). False if still busy after ``limit`` seconds."""
        scheduler = self.sc._jsc.sc().taskScheduler()
        end = time.time() + limit
        while True:
            counts = scheduler.runningTasksByExecutors().values().iterator()
            while counts.hasNext():
                if counts.next():
                    break
            else:
                return True
            if time.time() > end:
                return False
            time.sleep(0.02)


SMALL_JOB_TOKENS = 2_000_000  # below it, the local engine's tasks run in the driver
_FN: Callable | None = None  # the forked pool's job (set before the fork)


def _call(i):
    assert _FN is not None
    return _FN(i)


_JOB: list = [None]  # a clean worker's function of the job it works for


def _call_pickled(item):
    """Task ``i`` of a job: its pickled function comes with the worker's first task of
    the job (``payload``; None after), and is unpickled then."""
    payload, i = item
    if payload is not None:
        import pickle

        _JOB[0] = pickle.loads(payload)
    return _JOB[0](i)


_CLEAN: tuple[tuple[int, int], Workers] | None = None


def _clean_pool(processes: int) -> Workers:
    """Workers forked from a fresh server process that has loaded the kernels, kept for
    the process's later jobs while this process's environment stays as it was (made
    again with the new one when it changes: the server's children would have the
    environment of its start, without credentials or an endpoint set since). Arrow's
    S3 client is not fork-safe (a child forked while the parent's client held its lock
    waits on it forever), so once this process has used an object store, its own forks
    are out."""
    global _CLEAN
    key = (processes, hash(frozenset(os.environ.items())))
    if _CLEAN is None or _CLEAN[0] != key:
        import atexit

        _drop_clean_pool()
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["fgram.jobs.local_worker"])
        target = functools.partial(serve, call=_call_pickled, env=dict(os.environ))
        _CLEAN = (key, Workers(ctx, processes, target))
        atexit.register(_drop_clean_pool)  # ended before exit
    return _CLEAN[1]


def _drop_clean_pool() -> None:
    global _CLEAN
    if _CLEAN is not None:
        _CLEAN[1].kill()
        _CLEAN = None


def _answers(
    workers: Workers,
    items,
    progress: bool,
    end: Callable[[], None],
    watch: Watch = None,
    context: Any = None,
) -> list:
    """The workers' answers in order; the first failure (or what ``watch`` raises) ends
    them all at once (``end``) and is raised as our own error when it is one."""
    try:
        return list(_counted(workers.imap(items, context), progress, watch))
    except BaseException as exc:
        end()
        if isinstance(exc, Exception):
            reraise(exc)
        raise


def _counted(results, progress: bool, watch: Watch = None):
    """The results as they come, each one reported to the progress display and shown to
    ``watch``."""
    for r in results:
        if progress:
            PROGRESS.advance()
        if watch is not None:
            watch(r)
        yield r


class LocalExecutor(Executor):
    """Forked worker processes on this machine; no JVM. Forked from this process for each
    job (they share what it has loaded), or, once it has used an object store, a pool
    forked from a clean server process (`_clean_pool`)."""

    name = "local"
    spark = None
    shares_memory = True

    def __init__(self, processes: int | None = None):
        self.parallelism = processes or os.cpu_count() or 1
        self.chosen = processes is not None  # asked for (``local[N]``), kept whatever the job

    def fit(self, tokens: int) -> None:
        """A job under `SMALL_JOB_TOKENS` runs its tasks in this process (workers forked
        for each stage cost more than they save); processes asked for stay."""
        if tokens < SMALL_JOB_TOKENS and not self.chosen:
            self.parallelism = 1

    def map(
        self, n: int, fn, overlap: bool = False, progress: bool = False, watch: Watch = None
    ) -> list:
        global _FN
        if n == 0:
            return []
        if self.parallelism == 1 or n == 1:
            try:
                return list(_counted((fn(i) for i in range(n)), progress, watch))
            except Exception as exc:  # noqa: BLE001
                reraise(exc)
        if object_store_used():
            return self._map_clean(n, fn, progress, watch)
        _FN = fn
        workers = Workers(
            mp.get_context("fork"), min(self.parallelism, n), functools.partial(serve, call=_call)
        )
        try:
            return _answers(workers, range(n), progress, workers.kill, watch)
        finally:
            _FN = None
            workers.close()  # after a failure, they are gone already

    def map_batched(self, n: int, fn) -> list:
        """``map``: a task costs a message on a pipe (the function crosses each worker's
        pipe once per job), and each worker takes the next item when it is free (no
        batch holds more than its share)."""
        return self.map(n, fn)

    def _map_clean(self, n: int, fn, progress: bool = False, watch: Watch = None) -> list:
        """``map`` on the clean workers: the function travels pickled by value
        (cloudpickle, as Spark sends it), once to each worker, and the first failure
        ends the others' tasks."""
        from pyspark import cloudpickle

        payload = cloudpickle.dumps(fn)
        pool = _clean_pool(self.parallelism)
        return _answers(pool, range(n), progress, _drop_clean_pool, watch, payload)
