"""A job's steps as named objects, after datatrove's pipeline steps.

A `Stage` holds plain data (a plan, a pass's length, thresholds: what its tasks need)
and travels to the workers whole. ``run(i)`` does task i: it reads and writes files,
is idempotent, and returns a small summary; ``summary(results)`` folds the tasks'
summaries into what the driver and the manifest keep. An executor runs a stage as
``ex.map(n, stage.run)``.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Stage:
    """One step of a job (see the module's docstring)."""

    name: ClassVar[str] = "stage"

    def run(self, task: int) -> Any:
        raise NotImplementedError

    def summary(self, results: list[Any]) -> dict[str, Any]:
        return {"tasks": len(results)}
