"""PySpark's worker daemon for local mode, importing pyspark's installed modules.

Spark puts its source zip of pyspark first on the workers' PYTHONPATH. A zip
holds no compiled bytecode, so every daemon start compiled pyspark again
(~1 s of CPU, measured), and every worker it forks compiled the worker
modules (~0.3-0.5 s more each), all while the driver is counting. Local mode
started by fgram itself (not under spark-submit, whose --py-files reach a
worker only after its daemon has started) runs this instead
(``spark.python.daemon.module``): it moves the zips behind
the interpreter's own paths, where the same pyspark is installed with its
``.pyc`` files, then runs pyspark's daemon. It imports nothing else before
the daemon forks its workers (no threads may run across a fork).
"""
import sys

if __name__ == "__main__":
    zips = [p for p in sys.path if p.endswith(".zip")]
    sys.path[:] = [p for p in sys.path if not p.endswith(".zip")] + zips
    from pyspark.daemon import manager
    manager()
