"""The one module that imports Spark: builds a session that works on a fresh machine."""
from __future__ import annotations

import os
import sys


def local_defaults() -> dict[str, str]:
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.task.maxFailures": "4",
        # The driver JVM only schedules here (data moves in files, not through the
        # JVM), and on a small machine its C2 JIT and parallel GC threads take CPU
        # from the tasks: C1-only JIT and the serial GC (about 11% faster at 100M
        # tokens on 2 cores; BENCHMARKS.md). --conf spark.driver.extraJavaOptions=... overrides.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }


def _settings(master: str | None, conf: dict[str, str] | None) -> tuple[str | None, dict]:
    """(master to set or None, settings) for a new context or session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    submitted = "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "") or \
        os.environ.get("SPARK_ENV_LOADED")
    chosen = master or (None if submitted else "local[*]")
    effective = chosen or _submitted_master()
    # bind to 127.0.0.1 only in local mode: a cluster's executors must reach the driver
    settings = local_defaults() if effective.startswith("local") else {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    settings.update(conf or {})
    return chosen, settings


def _submitted_master() -> str:
    """The master that spark-submit was given ("" when it cannot be read)."""
    try:
        from pyspark import SparkConf, SparkContext
        SparkContext._ensure_initialized()      # under spark-submit: connects to its JVM
        return SparkConf().get("spark.master", "") or ""
    except Exception:  # noqa: BLE001 - then treat it as a cluster: no loopback binding
        return ""


def get_context(master: str | None = None, conf: dict[str, str] | None = None,
                app_name: str = "fgram"):
    """Return the active SparkContext, or start one (same defaults as `get_session`).

    The jobs that only run tasks need no SQL session: a bare context starts
    in about two thirds of the time (no Catalyst state) and takes less CPU
    from the tasks on a small machine. `session` makes one on demand.
    """
    chosen, settings = _settings(master, conf)
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active
    sconf = SparkConf().setAppName(app_name)
    if chosen:
        sconf.setMaster(chosen)
    sconf.setAll(list(settings.items()))
    sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel("ERROR")
    return sc


def session():
    """The SparkSession over the active context (its settings included)."""
    from pyspark.sql import SparkSession
    return SparkSession.builder.getOrCreate()


def get_session(master: str | None = None, conf: dict[str, str] | None = None,
                app_name: str = "fgram"):
    """Return the active SparkSession, or build one.

    Local mode (``local[*]``) by default, bound to 127.0.0.1 with the UI off;
    Python workers run the interpreter that runs this code. ``master`` and
    ``conf`` override anything, so a cluster is one flag away. Under
    spark-submit the submitted master wins.
    """
    chosen, settings = _settings(master, conf)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in (conf or {}).items():
            try:
                active.conf.set(key, value)
            except Exception:  # noqa: BLE001 - static confs cannot change on a live session
                pass
        return active
    builder = SparkSession.builder.appName(app_name)
    if chosen:
        builder = builder.master(chosen)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
