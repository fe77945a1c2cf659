"""A job's steps as named objects, after datatrove's pipeline steps.

A `Stage` holds plain data (a plan, a pass's length, thresholds: what its tasks need)
and travels to the workers whole. ``run(i)`` does task i: it reads and writes files,
is idempotent, and returns a small summary; ``summary(results)`` folds the tasks'
summaries into what the driver and the manifest keep. An executor runs a stage as
``ex.map(n, stage.run)``. Most stages are a task function and its arguments: the
stage's fields by name, and the task's number as its ``index`` argument (`call`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar


class Stage:
    """One step of a job (see the module's docstring)."""

    name: ClassVar[str] = "stage"
    call: ClassVar[Callable[..., Any]]  # the task function (a staticmethod)
    index: ClassVar[str | None] = None  # its argument for the task's number (None: one task)

    def __init_subclass__(
        cls, name: str = "", call: Callable[..., Any] | None = None, index: str | None = None
    ) -> None:
        """``class CountStage(Stage, name="count", call=count_task, index="u")``."""
        super().__init_subclass__()
        cls.name = name or cls.__name__
        if call is not None:
            cls.call = staticmethod(call)
        cls.index = index

    def run(self, task: int) -> Any:
        """``call`` with the stage's fields as keyword arguments (a dataclass's), and the
        task's number as ``index``."""
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        if self.index is not None:
            kwargs[self.index] = task
        return self.call(**kwargs)

    def summary(self, results: list[Any]) -> dict[str, Any]:
        return {"tasks": len(results)}
