"""The Spark session and context that fgram builds: local mode that works on a fresh
machine (loopback only, no UI, the quiet log4j configuration), any master when asked."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading


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
        # the workers' pyspark from the installed package, not Spark's source zip
        # (`fgram.spark.daemon`): less CPU at every start
        DAEMON: "fgram.spark.daemon",
        # The driver JVM only schedules here (data moves in files, not through the
        # JVM), and on a small machine its C2 JIT and parallel GC threads take CPU
        # from the tasks: C1-only JIT and the serial GC (docs/internals.md).
        # --conf spark.driver.extraJavaOptions=... overrides.
        JAVA_OPTS: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }


JAVA_OPTS = "spark.driver.extraJavaOptions"
DAEMON = "spark.python.daemon.module"
LOG_LEVEL = "FGRAM_LOG_LEVEL"  # `fgram --log-level`: off, error (default), warn, info, debug
LEVELS = ("off", "error", "warn", "info", "debug")
# what the JVM prints on every start whatever its log level (the JDK's own warning, Spark's
# notes about its default profile, Hadoop's native-library warning): dropped unless debugging
NOISE = (
    "WARNING: Using incubator modules",
    "Using Spark's default log4j profile",
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
    "NativeCodeLoader: Unable to load native-hadoop",
)


def log_level() -> str:
    level = os.environ.get(LOG_LEVEL, "error").lower()
    return level if level in LEVELS else "error"


def _log_options() -> str:
    """Driver JVM options for fgram's log4j configuration at `log_level`."""
    level = log_level()
    config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    tasks = level if level in ("info", "debug") else "off"
    return (
        f"-Dlog4j2.configurationFile=file:{config} -Dfgram.log.level={level} "
        f"-Dfgram.log.tasks={tasks}"
    )


# set by the command's Ctrl-C handler: what the JVM says while it is shut down after it
# (a scheduler's accumulator error, its stack) is not the run's end, which is one line
MUTED: list[bool] = []


def _quiet_accumulators(sc) -> None:
    """PySpark's accumulator server prints a traceback for a connection the JVM closes in
    the middle of an update, as its shutdown after a Ctrl-C does: once `MUTED`, it says
    nothing (fgram keeps no accumulators; the run's end is one line)."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None or getattr(server, "fgram_quiet", False):
        return
    loud = server.handle_error

    def handle_error(request, client_address) -> None:
        if not MUTED or log_level() == "debug":
            loud(request, client_address)

    server.handle_error, server.fgram_quiet = handle_error, True


def _forward(stream, out) -> None:
    """Copy the JVM's stderr lines to ``out``, without the start-up `NOISE` and blank lines
    (nor anything after a Ctrl-C, `MUTED`, unless debugging)."""
    keep_all = log_level() == "debug"
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        if MUTED and not keep_all:
            continue
        if keep_all or (line.strip() and not any(n in line for n in NOISE)):
            try:
                out.write(line)
                out.flush()
            except (ValueError, OSError):  # stderr closed at interpreter exit
                return


def _spark_conf(chosen: str | None, settings: dict, app_name: str):
    """The SparkConf of a new context or session: ``chosen`` master (None: spark-submit's)."""
    from pyspark import SparkConf

    sconf = SparkConf().setAppName(app_name)
    if chosen:
        sconf.setMaster(chosen)
    return sconf.setAll(list(settings.items()))


def jvm_reports() -> str:
    """Where a driver JVM fgram launches writes its crash report, ``hs_err_pid*.log``: the
    cache (`fgram clean` lists them), not the working directory."""
    from fgram.pipeline.io.cache import cache_dir

    return cache_dir()


def jvm_ended(wait: float = 0.0) -> str | None:
    """What ended this process's Spark JVM, in words, when it is gone (a failure after it
    is the JVM's end, not a refused connection); None while it runs, or without one.
    ``wait``: seconds for a dying JVM's exit (its refused connection can come first)."""
    import glob

    if "pyspark" not in sys.modules:  # no JVM in this process
        return None
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait) if wait else proc.poll()
    if proc.returncode is None:
        return None
    code = proc.returncode
    if code == -9:
        how = "was killed (SIGKILL: most often the kernel's out-of-memory killer)"
    elif code < 0:
        how = f"was killed by signal {-code}"
    else:
        how = f"exited with status {code}"
    reports = sorted(
        glob.glob(os.path.join(jvm_reports(), "hs_err_pid*.log")), key=os.path.getmtime
    )
    report = f"; its crash report: {reports[-1]}" if reports and code > 0 else ""
    return (
        f"the Spark JVM {how}: give it more memory (--conf spark.driver.memory=4g), or run "
        f"without it (--engine local){report}"
    )


def _launch_quietly(sconf) -> None:
    """Launch the driver JVM ourselves (when pyspark is about to: not under spark-submit,
    no gateway yet), its stderr through `_forward`, and hand the gateway to pyspark."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    gateway = launch_gateway(sconf, popen_kwargs={"stderr": subprocess.PIPE})
    threading.Thread(
        target=_forward,
        args=(gateway.proc.stderr, sys.stderr),
        name="fgram-jvm-stderr",
        daemon=True,
    ).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=sconf)


def class_archive() -> str | None:
    """Where the driver JVM's class-data-sharing archive for this JDK and this Spark
    lives (``$FGRAM_CACHE_DIR``, else ``~/.cache/fgram``), or None without a java.

    Loading Spark's classes is most of a local JVM's start, which the archive
    shortens (docs/internals.md). The archive is the JDK's own format; one made for another
    JDK or Spark has another name, and one the JVM cannot use is ignored.
    """
    import hashlib
    import shutil

    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin") if home else None)
    if not java:
        return None
    java = os.path.realpath(java)
    key = hashlib.sha256(
        repr(
            (
                java,
                os.stat(java).st_mtime,
                pyspark.__version__,
                os.path.dirname(os.path.abspath(pyspark.__file__)),
                os.environ.get("SPARK_CONF_DIR"),
            )
        ).encode()
    ).hexdigest()[:16]
    folder = os.environ.get("FGRAM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fgram"
    )
    return os.path.join(folder, f"spark-classes-{key}.jsa")


def _being_written(archive: str, pid: int | None = None) -> str:
    """Where process ``pid`` (default: this one) has its JVM write ``archive``."""
    return f"{archive}.{os.getpid() if pid is None else pid}.tmp"


def with_class_archive(settings: dict) -> str | None:
    """Add the class archive to the driver JVM's options (``settings``, in place): use it
    when it exists, else have this JVM write it at exit. Returns the archive being
    written (its final path), or None. Only for a JVM that pyspark is about to launch
    in local mode."""
    try:
        final = class_archive()
        if final is None:
            return None
        os.makedirs(os.path.dirname(final), exist_ok=True)
        if not os.access(os.path.dirname(final), os.W_OK):
            return None
    except OSError:
        return None
    quiet = " -Xlog:cds=off -Xlog:cds+dynamic=off"  # an unusable archive is skipped silently
    if os.path.exists(final):
        settings[JAVA_OPTS] += f" -XX:SharedArchiveFile={final}{quiet}"
        with contextlib.suppress(OSError):
            os.utime(final)  # its time is its last use: see _tidy
        return None
    if os.path.exists(final + ".none"):  # this JVM could not write one: do not retry
        return None
    _tidy(os.path.dirname(final), KEEP_ARCHIVES)
    settings[JAVA_OPTS] += f" -XX:ArchiveClassesAtExit={_being_written(final)}{quiet}"
    return final


KEEP_ARCHIVES = 3  # archives of other JDKs / Spark installs (venvs) kept besides a new one


def _tidy(folder: str, keep: int) -> None:
    """Before another archive is written: delete the archives being written by runs
    that are gone (killed before their JVM exited), and all but the ``keep`` most
    recently used archives (~180 MB each; one per JDK and Spark install, so each new
    virtual environment adds one)."""
    from fgram.pipeline.io.locks import process_alive

    doomed, archives = [], []
    for name in os.listdir(folder):
        if not name.startswith("spark-classes-"):
            continue
        parts = name.split(".")
        if parts[-1] == "tmp" and parts[-2].isdigit() and not process_alive(int(parts[-2])):
            doomed.append(name)
        elif name.endswith(".jsa"):
            with contextlib.suppress(OSError):
                archives.append((os.stat(os.path.join(folder, name)).st_mtime, name))
    doomed += [name for _, name in sorted(archives, reverse=True)[keep:]]
    for name in doomed:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, name))


def _keep_class_archive(sc, final: str) -> None:
    """At exit of the run that launched the JVM with ``ArchiveClassesAtExit``: stop it,
    let it write the archive, and publish a complete one (rename: never a partial)."""
    import atexit

    tmp = _being_written(final)

    def save():
        proc = getattr(sc._gateway, "proc", None)
        try:
            if proc is not None:
                sc.stop()
                proc.stdin.close()  # the gateway JVM exits at EOF on its stdin
                proc.wait(timeout=120)
                if proc.returncode == 0 and os.path.exists(tmp) and os.path.getsize(tmp) > 0:
                    os.replace(tmp, final)
                elif proc.returncode == 0:
                    open(final + ".none", "w").close()
        except Exception:  # noqa: BLE001 - only a start-up cache: the run's result stands
            pass
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    atexit.register(save)


def spark_settings(master: str | None, conf: dict[str, str] | None) -> tuple[str | None, dict]:
    """(master to set or None, settings) for a new context or session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    submitted = under_spark_submit()
    chosen = master or (None if submitted else "local[*]")
    effective = chosen or _submitted_master()
    # bind to 127.0.0.1 only in local mode: a cluster's executors must reach the driver
    settings = (
        local_defaults()
        if effective.startswith("local")
        else {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    )
    if submitted:  # --py-files reach a worker only after its daemon has started
        settings.pop(DAEMON, None)
    else:  # a JVM we launch logs through fgram's configuration, and crashes into the cache
        crash = f"-XX:ErrorFile={os.path.join(jvm_reports(), 'hs_err_pid%p.log')}"
        settings[JAVA_OPTS] = f"{settings.get(JAVA_OPTS, '')} {_log_options()} {crash}".strip()
    settings.update(conf or {})
    return chosen, settings


def effective_master(master: str | None) -> str:
    """The master a run gets: the one asked for, the one spark-submit was given, or
    local mode ("" when spark-submit's cannot be read)."""
    if master:
        return master
    from pyspark import SparkContext

    # a context that another thread is still making has no master yet (SparkContext's
    # __init__ registers it first): then the master it is being made with is this one's
    active = getattr(SparkContext._active_spark_context, "master", None)
    if active is not None:
        return str(active)
    return _submitted_master() if under_spark_submit() else "local[*]"


def under_spark_submit() -> bool:
    """Whether this process runs under spark-submit (which names its master)."""
    return "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "") or bool(
        os.environ.get("SPARK_ENV_LOADED")
    )


def _submitted_master() -> str:
    """The master that spark-submit was given ("" when it cannot be read)."""
    try:
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # under spark-submit: connects to its JVM
        return SparkConf().get("spark.master", "") or ""
    except Exception:  # noqa: BLE001 - then treat it as a cluster: no loopback binding
        return ""


def get_context(
    master: str | None = None, conf: dict[str, str] | None = None, app_name: str = "fgram"
):
    """Return the active SparkContext, or start one (same defaults as `get_session`).

    The jobs that only run tasks need no SQL session: a bare context starts
    in about two thirds of the time (no Catalyst state) and takes less CPU
    from the tasks on a small machine. `session` makes one on demand.
    """
    chosen, settings = spark_settings(master, conf)
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return active
    archive = _launching_archive(chosen, conf, settings)
    sconf = _spark_conf(chosen, settings, app_name)
    _launch_quietly(sconf)
    with own_sigint():
        sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel(log_level().upper())
    _quiet_accumulators(sc)
    if archive:
        _keep_class_archive(sc, archive)
    return sc


def _launching_archive(chosen: str | None, conf: dict | None, settings: dict) -> str | None:
    """The class archive for a driver JVM that pyspark launches now in local mode with
    our JVM options (not under spark-submit, not when --conf sets them)."""
    from pyspark import SparkContext

    if (
        SparkContext._gateway is not None
        or not chosen
        or not chosen.startswith("local")
        or JAVA_OPTS in (conf or {})
        or os.environ.get("PYSPARK_SUBMIT_ARGS")
    ):
        return None
    return with_class_archive(settings)


@contextlib.contextmanager
def own_sigint():
    """A Ctrl-C handler that fgram's command set (``fgram_sigint``) kept over a context's
    start: pyspark puts its own in place, which cancels the jobs through the gateway
    from inside the call the driver is waiting in (py4j's reentrant call logs two
    tracebacks); the command's notes the Ctrl-C and interrupts, and the JVM, in the same
    process group, hears it too. Elsewhere (a notebook, the API) pyspark's stays."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    finally:
        if getattr(before, "fgram_sigint", False):
            signal.signal(signal.SIGINT, before)


def session():
    """The SparkSession over the active context (its settings included)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def get_session(
    master: str | None = None, conf: dict[str, str] | None = None, app_name: str = "fgram"
):
    """Return the active SparkSession, or build one.

    Local mode (``local[*]``) by default, bound to 127.0.0.1 with the UI off;
    Python workers run the interpreter that runs this code. ``master`` and
    ``conf`` override anything, so a cluster is one flag away. Under
    spark-submit the submitted master wins.
    """
    chosen, settings = spark_settings(master, conf)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in (conf or {}).items():
            with contextlib.suppress(Exception):  # noqa: BLE001 - static confs cannot change on a live session
                active.conf.set(key, value)
        return active
    archive = _launching_archive(chosen, conf, settings)
    _launch_quietly(_spark_conf(chosen, settings, app_name))
    builder = SparkSession.builder.appName(app_name)
    if chosen:
        builder = builder.master(chosen)
    for key, value in settings.items():
        builder = builder.config(key, value)
    with own_sigint():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level().upper())
    _quiet_accumulators(spark.sparkContext)
    if archive:
        _keep_class_archive(spark.sparkContext, archive)
    return spark
