"""Intermediate files of a build: one folder per pass, one completed unit per file.

Every file is written aside and renamed into place, so a retried or
speculative task never leaves a half-written file for a reader.
"""
from __future__ import annotations

import json
import os
import threading
import uuid

import numpy as np


def save_array(path: str, arr: np.ndarray) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
    os.replace(tmp, path)


def load_array(path: str, mmap: bool = True) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


def read_into(path: str, scratch, name: str) -> np.ndarray:
    """A 1-d array file read into ``scratch``'s buffer ``name`` (a `kernels.Scratch`):
    a worker reading one such file per unit reuses the same pages (a fresh
    array's first touch costs more than the copy)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):     # np.save writes these: anything else, plainly
            return load_array(path, mmap=False)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(f)
        if len(shape) != 1 or dtype.hasobject:
            raise ValueError(f"{path}: not a 1-d array of numbers")
        out = scratch.get(name, shape[0], dtype)
        if f.readinto(memoryview(out).cast("B")) != out.nbytes:
            raise ValueError(f"{path}: truncated")
    return out


def save_json(path: str, obj, durable: bool = True) -> None:
    """Write JSON atomically (aside, then rename); ``durable`` also fsyncs it first."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def load_json(path: str):
    with open(path) as f:
        return json.load(f)


class WorkDir:
    """Names of a build's intermediate files."""

    def __init__(self, root: str):
        self.root = root

    def pass_dir(self, k: int) -> str:
        path = os.path.join(self.root, f"pass{k}")
        os.makedirs(path, exist_ok=True)
        return path

    def unit(self, k: int, u: int, what: str) -> str:
        return os.path.join(self.pass_dir(k), f"unit-{u:06d}.{what}.npy")

    def unit_done(self, k: int, u: int) -> str:
        return os.path.join(self.pass_dir(k), f"unit-{u:06d}.done.json")

    def merged(self, k: int, p: int, what: str) -> str:
        return os.path.join(self.pass_dir(k), f"merged-{p:05d}.{what}.npy")

    def frequent(self, k: int, p: int, what: str) -> str:
        return os.path.join(self.pass_dir(k), f"frequent-{p:05d}.{what}.npy")

    def decoded(self, k: int, p: int, what: str) -> str:
        return os.path.join(self.pass_dir(k), f"decoded-{p:05d}.{what}.npy")

    def answers(self, k: int, p: int, what: str) -> str:
        return os.path.join(self.pass_dir(k), f"answers-{p:05d}.{what}.npy")


class Sweeper:
    """Removes consumed intermediates in a background thread, one batch at a time.

    Unlinking frees every block of a file: a pass's consumed files (GBs at 500M
    tokens) took the driver 1-2 s between passes while the cores idled.
    """

    def __init__(self):
        self._thread: threading.Thread | None = None

    def sweep(self, paths: list[str]) -> None:
        self.wait()
        self._thread = threading.Thread(target=_remove_files, args=(paths,), daemon=True)
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def _remove_files(paths: list[str]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:     # gone already, or not ours to remove: the staging folder goes anyway
            pass
