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
