"""The driver works while the executor starts: `Starting` makes the executor in a
background thread (then, on Spark, runs a first job that starts the Python workers
and loads the kernels), and `HeadStart` runs each job's tasks in the driver until
that executor is ready, then hands it the rest."""

from __future__ import annotations

import time

from fgram.jobs.engines import guess_parallelism, make_executor, without_jvm
from fgram.jobs.executors import Executor, Watch, as_task, reraise
from fgram.jobs.progress import PROGRESS
from fgram.pipeline.kernels.warmup import warm_up


@as_task
def warm_task(i: int) -> int:
    """A first task per core: starts the Python worker and loads the kernels."""
    warm_up()
    return i


WARM_GROUP = "fgram-warm-up"


KILL_WAIT = 30.0  # seconds to wait for the cancelled warm-up job's tasks to end


class Starting:
    """`make_executor` in a background thread, then (Spark) a first job of `warm_task`s
    that starts the Python workers and loads the kernels: ``ready()`` once both are
    done; ``result()`` waits only for the executor (and re-raises). `HeadStart` runs
    tasks in the driver meanwhile. ``cfg`` has the job's engine, master and conf;
    ``check(executor)`` may refuse the executor made (raising), before any task runs."""

    def __init__(self, cfg, spark, check=None):
        import threading

        self._t0 = time.time()
        self.seconds: dict[str, float] = {}  # executor made, first job done (after start)
        self._out: list = []
        self._lock = threading.Lock()
        self._stop = False  # wait() was called: no warm-up to start (or finish)
        self._made = threading.Event()
        self._check = check
        self._thread = threading.Thread(target=self._run, args=(cfg, spark), daemon=True)
        if without_jvm(cfg):  # nothing to wait for: the driver runs no task
            self._run(cfg, spark)
        else:
            self._thread.start()

    def _run(self, cfg, spark):
        try:
            ex = make_executor(cfg.engine, spark, cfg.master, cfg.conf)
            if self._check is not None:
                self._check(ex)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            self._out.append(exc)
            self._made.set()
            return
        self._out.append(ex)
        self.seconds["made"] = round(time.time() - self._t0, 3)
        self._made.set()
        if ex.warms_up:
            with self._lock:
                if self._stop:
                    return
                ex.sc.setJobGroup(WARM_GROUP, "start the Python workers", interruptOnCancel=True)
            try:
                ex.map(ex.parallelism, warm_task)
                self.seconds["warm"] = round(time.time() - self._t0, 3)
            except Exception:  # noqa: BLE001 - only a warm-up: the real jobs report failures
                pass

    def wait(self) -> None:
        """Wait for the background start to end. A warm-up job still running is
        cancelled: the run is over (a small build can end before the workers are
        warm, and would wait for them)."""
        if self._thread.ident is None:
            return
        with self._lock:
            self._stop = True
            warming = (
                self._made.is_set()
                and not isinstance(self._out[0], BaseException)
                and self._out[0].warms_up
            )
        while self._thread.is_alive():
            if warming:  # again until it ends: the job may not be submitted yet
                self._out[0].sc.cancelJobGroup(WARM_GROUP)
            self._thread.join(0.2)
        if warming and "warm" not in self.seconds:
            # the cancelled job has ended, its tasks may not: one still running when the
            # context stops at exit finds its broadcast gone and Spark logs an ERROR
            self._out[0].wait_idle(KILL_WAIT)

    def ready(self) -> bool:
        """Made and warm: until then the driver's own tasks beat queueing behind the
        warm-up job."""
        return self._made.is_set() and not self._thread.is_alive()

    def made(self) -> bool:
        return self._made.is_set()

    def result(self):
        self._made.wait()
        if isinstance(self._out[0], BaseException):
            raise self._out[0]
        return self._out[0]


class HeadStart(Executor):
    """An executor still starting (``starting``: a `Starting`) and the
    driver meanwhile: each job's tasks run in the driver, one after another, until
    the executor is ready; it then gets the rest of the job, and every later one.

    A JVM takes seconds to start and its first Python tasks seconds more; the
    driver, with a core of its own, does useful work instead of waiting. Task
    results are the same wherever a task ran (tasks write files and return
    summaries). ``in_driver`` counts the tasks the driver ran (in an overlapped
    job, some of them may have found their marker).
    """

    def __init__(self, starting, master: str | None = None, release=None):
        self._starting = starting
        self.parallelism = guess_parallelism(master)  # until the executor is up
        self.in_driver = 0
        self._release = release  # called once, when the driver hands over

    @property
    def name(self):
        return self._starting.result().name

    @property
    def spark(self):
        return self._starting.result().spark

    def _split(
        self, n: int, fn, up=None, progress: bool = False, watch: Watch = None
    ) -> tuple[list, int]:
        """The driver runs tasks 0, 1, .. until ``up()`` (default: the executor is
        ready) or the job is done: (their results, how many)."""
        up = up or self._starting.ready
        out: list = []
        try:
            while len(out) < n and not up():
                out.append(fn(len(out)))
                self.in_driver += 1
                if progress:
                    PROGRESS.advance()
                if watch is not None:
                    watch(out[-1])
        except Exception as exc:  # noqa: BLE001 - our errors come back from as_task as markers
            reraise(exc)
        return out, len(out)

    def fit(self, tokens: int) -> None:
        """The executor fitted to the job, where it is up already (a local one is made
        at once; a Spark one has nothing to fit)."""
        if self._starting.ready():
            ex = self._starting.result()
            ex.fit(tokens)
            self.parallelism = ex.parallelism

    def _executor(self):
        ex = self._starting.result()
        self.parallelism = ex.parallelism
        if self._release is not None:
            self._release()
            self._release = None
        return ex

    def map(
        self, n: int, fn, overlap: bool = False, progress: bool = False, watch: Watch = None
    ) -> list:
        """``overlap``: the tasks are idempotent and each leaves a completion marker that
        a later run of it returns at once (the build's count tasks). Then the rest of
        the job goes to the executor as soon as it is made, not warm, and the driver
        keeps running tasks, from the last one down, until that job ends: the
        executor's tasks for those find their markers (at most a task per executor
        slot runs twice, with the same result)."""
        if overlap and not self._starting.ready():
            return self._overlapped(n, fn, progress, watch)
        out, i = self._split(n, fn, progress=progress, watch=watch)
        if i == n:
            return out
        return out + self._executor().map(
            n - i, lambda j: fn(i + j), progress=progress, watch=watch
        )

    def _overlapped(self, n: int, fn, progress: bool = False, watch: Watch = None) -> list:
        import threading

        out, i = self._split(n, fn, self._starting.made, progress, watch)
        if i == n:
            return out
        ex, box = self._starting.result(), {}

        def job():  # its count includes the tasks that find the driver's markers
            try:
                box["out"] = ex.map(n - i, lambda j: fn(i + j), progress=progress, watch=watch)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                box["exc"] = exc

        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        try:
            for j in range(n - 1, i - 1, -1):
                if not thread.is_alive():
                    break
                fn(j)
                self.in_driver += 1
        except Exception as exc:  # noqa: BLE001 - the job fails on the same input too
            thread.join()
            reraise(exc)
        thread.join()
        self._executor()  # the driver is done: give back its work arrays
        if "exc" in box:
            raise box["exc"]
        return out + box["out"]

    def map_batched(self, n: int, fn) -> list:
        out, i = self._split(n, fn)
        return out + self._executor().map_batched(n - i, lambda j: fn(i + j)) if i < n else out
