"""Model factories for the embed tests (imported by `fgram embed` in a subprocess)."""

import time

from fgram.pipeline.models import echo


def slow_echo():
    """The echo model, 0.2 s a call: slow enough to kill a run between chunks."""
    inner = echo()

    def model(tokens, lengths):
        time.sleep(0.2)
        return inner(tokens, lengths)

    return model


def killer():
    """A model whose every call inside a Spark task kills the task's Python worker
    (SIGKILL, as the OOM killer would); in the driver it is the echo model."""
    import os
    import signal

    from pyspark import TaskContext

    from fgram.pipeline.models import echo

    inner = echo()

    def model(tokens, lengths):
        if TaskContext.get() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return inner(tokens, lengths)

    return model
