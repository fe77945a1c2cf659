"""Intermediate files of a build: one folder per pass, one completed unit per file.

Every file is written aside and renamed into place, so a retried or
speculative task never leaves a half-written file for a reader.
"""
from __future__ import annotations

import json
import os
import uuid

import numpy as np


def save_array(path: str, arr: np.ndarray) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
    os.replace(tmp, path)


def load_array(path: str, mmap: bool = True) -> np.ndarray:
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


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
