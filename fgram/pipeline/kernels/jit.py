"""numba's ``njit``, typed and made on first use: a kernel keeps its annotations for the
type checker (numba ships no stubs); importing a module of kernels imports no numba
(~0.3 s), which a command that calls none (`fgram lookup`, `show`) never pays. Also the
array types the kernels take, by dtype."""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

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
    """``numba.njit(**options)`` as a decorator that keeps the kernel's signature, made
    on the kernel's first use (`Kernel`)."""

    def make(fn: F) -> F:
        return cast(F, Kernel(fn, options))

    return make


class Kernel:
    """A compiled kernel before numba is imported: ``py_func`` is its Python function.
    Its first call (or any use of numba's attributes) imports numba and makes every
    kernel defined so far (`_make`: numba compiles each on its own first call), each
    put in the place of its `Kernel` in fgram's modules, where kernels that call kernels
    find numba's own."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        functools.update_wrapper(self, fn)
        self.py_func = fn
        self.options = options
        self.made: Any = None
        _WAITING.append(self)

    def __call__(self, *args: Any, **kw: Any) -> Any:
        return (self.made or _make(self))(*args, **kw)

    def __getattr__(self, name: str) -> Any:  # numba's own (``_cache``, ``signatures``)
        if name.startswith("__") or name in ("made", "py_func", "options"):
            raise AttributeError(name)
        return getattr(self.made or _make(self), name)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:  # by name, as a function is
        return _named, (self.__module__, self.__qualname__)


_WAITING: list[Kernel] = []
_MAKING = threading.Lock()  # threads may call their first kernels at once (the audit's)
_PACKAGE = __name__.split(".")[0]


def _make(kernel: Kernel) -> Any:
    """``kernel`` made, with every kernel waiting (numba imported); the modules of this
    package given numba's in their place."""
    import numba

    with _MAKING:
        for k in [*_WAITING, kernel]:
            if k.made is None:
                k.made = numba.njit(**k.options)(k.py_func)
        _WAITING.clear()
        for name, mod in list(sys.modules.items()):
            if mod is not None and name.split(".")[0] == _PACKAGE:
                names = vars(mod)
                for key, value in list(names.items()):
                    if isinstance(value, Kernel) and value.made is not None:
                        names[key] = value.made
    return kernel.made


def _named(module: str, qualname: str) -> Any:
    return getattr(importlib.import_module(module), qualname)


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
            if getattr(value, "py_func", None) is not None:  # a kernel (made or not)
                scope[name] = interpreted(value)
    return cast(F, _INTERPRETED[key])
