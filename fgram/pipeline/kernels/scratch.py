"""Work arrays reused across the units a worker process handles."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike


class Scratch:
    """Grow-only work arrays reused by the calls of one process.

    Touching fresh memory costs page faults (in a VM, more than sorting the same
    bytes); a worker that counts unit after unit reuses
    the same pages instead. An array from `get` is valid until the next `get`
    of the same name.
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def __getstate__(self) -> dict[str, Any]:  # never ship the buffers (e.g. inside a pickled task)
        return {"_bufs": {}}

    def clear(self) -> None:
        self._bufs.clear()

    def held(self) -> int:
        """The bytes of the work arrays held."""
        return sum(b.nbytes for b in self._bufs.values())

    def get(self, name: str, n: int, dtype: DTypeLike) -> np.ndarray:
        dtype = np.dtype(dtype)
        need = max(n, 1) * dtype.itemsize
        buf = self._bufs.get(name)
        if buf is None or len(buf) < need:
            buf = self._bufs[name] = np.empty(need + need // 8, np.uint8)
        return buf[: n * dtype.itemsize].view(dtype)


def work_array(scratch: Scratch | None, name: str, n: int, dtype: DTypeLike) -> np.ndarray:
    """``scratch``'s buffer ``name`` as n items of dtype, or a fresh array without one."""
    return np.empty(n, dtype) if scratch is None else scratch.get(name, n, dtype)
