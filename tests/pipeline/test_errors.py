"""Every error class comes back from a task as itself: same class, same message and
arguments, through a forked local worker and through a real Spark job (the driver
decides by class what a failure means: --resume advice, exit status)."""

import pytest

from fgram.jobs.executors import LocalExecutor, SparkExecutor, as_task
from fgram.pipeline.errors import (
    FgramError,
    InputError,
    LockedError,
    StorageUnavailable,
    error_classes,
    from_marker_text,
)


def _sample(cls):
    if issubclass(cls, InputError):
        return cls("s3://bucket/in/a b.bin", 'size 7 bytes is not a multiple of uint16: "x"')
    return cls(f"{cls.__name__}: s3://bucket/out: one line, with 'quotes' and :: colons")


def _same(got, want):
    assert type(got) is type(want) and str(got) == str(want)
    assert vars(got) == vars(want)  # InputError's path and problem too


def test_every_class_is_known_and_survives_its_marker():
    classes = error_classes()
    assert {
        "FgramError",
        "InputError",
        "ConfigError",
        "OutputError",
        "LockedError",
        "StorageUnavailable",
        "WorkerSetupError",
    } <= set(classes)
    for cls in classes.values():
        err = _sample(cls)
        _same(from_marker_text("Traceback ...\nRuntimeError: " + err.marker_text() + "\n\tat"), err)
    assert from_marker_text("no marker here") is None
    assert type(from_marker_text("FGRAM-ERROR::{broken")) is FgramError


def _raising(err):
    def body(i):
        raise err

    return as_task(body)


@pytest.mark.spark
@pytest.mark.parametrize("where", ["local", "spark"])
def test_every_class_comes_back_from_a_task_as_itself(spark, where):
    ex = SparkExecutor(spark) if where == "spark" else LocalExecutor(2)
    for cls in error_classes().values():
        err = _sample(cls)
        with pytest.raises(FgramError) as got:
            ex.map(2, _raising(err))
        _same(got.value, err)
    assert issubclass(LockedError, FgramError) and issubclass(StorageUnavailable, FgramError)


def test_every_class_pickles_as_itself():
    import pickle

    for cls in error_classes().values():
        err = _sample(cls)
        _same(pickle.loads(pickle.dumps(err)), err)
