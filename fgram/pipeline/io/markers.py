"""One completion marker per unit of work, the same for every job (after datatrove's):
a small JSON file, ``<folder>/<stage>/<unit:08d>.done.json``, written last (aside, then
renamed) by the task that finished the unit, holding what the task returns. A rerun of
the unit (a head start's, a resumed run's, a retried or speculative task) finds it and
returns what it recorded instead of doing the work again."""

from __future__ import annotations

from typing import Any

from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import exists, load_json, make_dirs, remove, save_json

SUFFIX = ".done.json"


class Markers:
    """The completion markers of one stage's units, below ``folder``."""

    def __init__(self, folder: Location, stage: str) -> None:
        self.folder = folder.child(stage)

    def path(self, unit: int) -> Location:
        return self.folder.child(f"{unit:08d}{SUFFIX}")

    def done(self, unit: int) -> bool:
        return exists(self.path(unit))

    def read(self, unit: int) -> Any:
        """What the unit's task recorded (its marker must be there)."""
        return load_json(self.path(unit))

    def mark(self, unit: int, record: Any, durable: bool = True) -> None:
        """The unit is done, with ``record``: the task's last write. ``durable`` fsyncs
        it first (work files a lost machine takes with it need not be)."""
        make_dirs(self.folder)
        save_json(self.path(unit), record, durable=durable)

    def clear(self, unit: int) -> None:
        """The unit is to be done again."""
        remove(self.path(unit))

    def count(self, units: int) -> int:
        """How many of units 0 .. units-1 are done."""
        return sum(self.done(u) for u in range(units))
