"""numba's ``njit``, typed: a kernel keeps its annotations for the type checker (numba
ships no stubs), and the array types the kernels take, by dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from numpy.typing import NDArray

F = TypeVar("F", bound=Callable[..., Any])

U8s = NDArray[np.uint8]
U32s = NDArray[np.uint32]
U64s = NDArray[np.uint64]
I32s = NDArray[np.int32]
I64s = NDArray[np.int64]
Array = NDArray[Any]  # a kernel compiled for several dtypes


def compiled(**options: Any) -> Callable[[F], F]:
    """``numba.njit(**options)`` as a decorator that keeps the kernel's signature."""
    return cast(Callable[[F], F], numba.njit(**options))
