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


_INTERPRETED: dict[int, Any] = {}


def interpreted(kernel: F) -> F:
    """The Python function a compiled kernel was made from, the kernels it calls replaced
    by theirs alike: the same code run by the interpreter, with no compiled code loaded.
    A command that matches one short context (`fgram lookup`) is done before numba's
    first call of a kernel would have loaded its machine code (~0.3 s); a loop over many
    positions wants the kernel itself. numpy's integer overflow warnings are the
    interpreter's only: the kernels wrap as the compiled code does."""
    import types

    py = getattr(kernel, "py_func", None)
    if py is None:
        return kernel
    key = id(kernel)
    if key not in _INTERPRETED:
        scope = dict(py.__globals__)
        fn = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
        _INTERPRETED[key] = fn  # before its callees: a kernel may call itself
        for name, value in py.__globals__.items():
            if hasattr(value, "py_func") and isinstance(value, numba.core.dispatcher.Dispatcher):
                scope[name] = interpreted(value)
    return cast(F, _INTERPRETED[key])
