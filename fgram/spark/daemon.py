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
"""

import os
import sys

if __name__ == "__main__":
    zips = [p for p in sys.path if p.endswith(".zip")]
    here = [p for p in sys.path if p in ("", os.getcwd())]
    sys.path[:] = [p for p in sys.path if not p.endswith(".zip") and p not in here] + zips
    for name in [m for m in sys.modules if m == "fgram" or m.startswith("fgram.")]:
        del sys.modules[name]  # a namespace package found in the working directory
    import fgram  # noqa: F401,E402 - the installed package, first

    sys.path += here
    from pyspark.daemon import manager

    manager()
