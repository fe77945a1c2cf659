"""Which engine a job runs on and its executor (`executors`): ``--engine auto`` resolved
once, from the master, the session and the process; where the tasks run (this machine or
a cluster) and the cores they share here."""

from __future__ import annotations

import os
import re
import sys

from fgram.jobs.executors import LocalExecutor, SparkExecutor


def guess_parallelism(master: str | None) -> int:
    """Cores of a master, as far as its name tells: local[N] is N, local[*] (the
    default) this machine's; a cluster's is known once it is up (2 until then)."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master or "local[*]")
    if m is None:
        return 2
    return os.cpu_count() or 1 if m.group(1) in (None, "*") else int(m.group(1))


def without_jvm(cfg) -> bool:
    """Whether a job (its engine resolved) runs its tasks in local processes, with no
    JVM to start."""
    return cfg.engine == "local"


def runs_here(cfg) -> bool:
    """Whether a job's tasks run on this machine: ``cfg.engine`` local, or Spark in
    local mode (``cfg.master``)."""
    if without_jvm(cfg):
        return True
    from fgram.spark.session import effective_master

    return effective_master(cfg.master).startswith("local")


def cores_here(cfg) -> int:
    """The cores a job's tasks share on this machine: every core for local processes, a
    local master's (``local[N]``) for Spark."""
    if without_jvm(cfg):
        return os.cpu_count() or 1
    from fgram.spark.session import effective_master

    return guess_parallelism(effective_master(cfg.master))


def chosen_engine(cfg, spark=None) -> str:
    """The engine a job runs on: ``cfg.engine``, with ``auto`` resolved (`engine_for`)."""
    return engine_for(cfg.engine, spark, cfg.master, cfg.conf)


def engine_for(
    engine: str, spark=None, master: str | None = None, conf: dict[str, str] | None = None
) -> str:
    """``engine``, or for ``auto``: ``local`` (local processes) when Spark would run on
    this machine alone: a local master, no ``--conf``, no session given or running, no
    spark-submit (the JVM would add its start and nothing else); else ``spark``."""
    if engine != "auto":
        return engine
    if spark is not None or conf:
        return "spark"
    from fgram.spark.session import under_spark_submit

    if jvm_up() or under_spark_submit():
        return "spark"
    return "local" if (master or "local").startswith("local") else "spark"


def jvm_up() -> bool:
    """Whether this process has a SparkContext (none where pyspark is not imported)."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def make_executor(
    engine: str,
    spark=None,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    processes: int | None = None,
):
    """The executor for ``--engine``: local processes (``processes``, else as many as a
    ``local[N]`` master names, else a core each; one runs the tasks in this process), or
    Spark (a given session, the active one, or a new context: SQL starts only if a job
    needs it); ``auto`` as `engine_for` decides."""
    engine = engine_for(engine, spark, master, conf)
    if engine == "local":
        local = master is not None and master.startswith("local")
        return LocalExecutor(processes or (guess_parallelism(master) if local else None))
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is None:
        from fgram.spark.session import get_context

        spark = get_context(master, conf)
    elif conf:
        from fgram.spark.session import get_session

        get_session(master, conf)  # applies the runtime settings to the active session
    return SparkExecutor(spark)
