"""What the local engine's clean worker server loads before it forks workers (see
`executors.LocalExecutor`): the jobs' task modules (their task functions are pickled by
reference) and the compiled kernels."""

import importlib

from fgram.pipeline.kernels.warmup import warm_up

for _module in ("fgram.jobs.annotate", "fgram.jobs.table", "fgram.jobs.refresh"):
    importlib.import_module(_module)
warm_up()
