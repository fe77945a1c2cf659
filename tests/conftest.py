import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))

# Speed is measured in bench/, never here: no per-example deadlines on this shared machine.
settings.register_profile("fgram", deadline=None)
settings.load_profile("fgram")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session (small, 2 cores, UI off)."""
    from fgram.pipeline.spark import get_session

    session = get_session("local[2]", {"spark.sql.shuffle.partitions": "2",
                                       "spark.default.parallelism": "2"})
    yield session
    session.stop()
