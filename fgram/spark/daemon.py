"""PySpark's worker daemon for local mode, importing pyspark's installed modules.

Spark puts its source zip of pyspark first on the workers' PYTHONPATH. A zip
holds no compiled bytecode, so every daemon start compiled pyspark again,
and every worker it forks compiled the worker modules, all while the driver is counting. Local mode
started by fgram itself (not under spark-submit, whose --py-files reach a
worker only after its daemon has started) runs this instead
(``spark.python.daemon.module``): it moves the zips behind
the interpreter's own paths, where the same pyspark is installed with its
``.pyc`` files, then runs pyspark's daemon. It imports nothing else before
the daemon forks its workers (no threads may run across a fork).

It also imports the installed `fgram` before the working directory is on the
path: the daemon runs as ``python -m``, which puts the working directory first,
and a folder named ``fgram`` there (a checkout, run from the folder above it)
would otherwise become the workers' ``fgram``, an empty namespace package, for
an editable install, whose modules are found after every path entry. The
working directory goes back at the end of the path (modules of the user's,
such as an ``embed --model``, still import from it).

A worker whose task the JVM gave up (a cancelled stage, a failing sibling, a stopped
context) finds its socket reset or closed under it. pyspark's daemon prints that as a
traceback into the run's output, though the JVM already knows the task is gone:
`quiet_worker` ends such a worker without a word (exceptions of the task itself never
reach it: pyspark's worker sends them to the JVM).
"""

import os
import socket
import sys


def quiet_worker(sock: socket.socket, authenticated: bool) -> int:
    """pyspark's daemon ``worker``, silent when the JVM's end of the socket is gone."""
    from pyspark import daemon

    try:
        code: int = daemon.real_worker(sock, authenticated)  # type: ignore[attr-defined]
        return code
    except (ConnectionResetError, BrokenPipeError):
        return 1  # the daemon then drains the socket and ends the worker


def install() -> None:
    """pyspark's daemon, its workers made quiet (`quiet_worker`)."""
    from pyspark import daemon

    # a flush to a socket the JVM closed raises (into `quiet_worker`), not a printed traceback
    os.environ.setdefault("PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE", "1")
    if not hasattr(daemon, "real_worker"):
        daemon.real_worker = daemon.worker  # type: ignore[attr-defined]
        daemon.worker = quiet_worker


if __name__ == "__main__":
    zips = [p for p in sys.path if p.endswith(".zip")]
    here = [p for p in sys.path if p in ("", os.getcwd())]
    sys.path[:] = [p for p in sys.path if not p.endswith(".zip") and p not in here] + zips
    for name in [m for m in sys.modules if m == "fgram" or m.startswith("fgram.")]:
        del sys.modules[name]  # a namespace package found in the working directory
    import fgram  # noqa: F401,E402 - the installed package, first

    sys.path += here
    from pyspark.daemon import manager

    install()
    manager()
