"""Atomic publishing: build aside, then rename into place; `_SUCCESS` last."""
from __future__ import annotations

import os
import shutil
import uuid

from .errors import OutputError


def check_output(out: str, overwrite: bool) -> str:
    out = os.path.abspath(out)
    if os.path.exists(out) and not overwrite:
        raise OutputError(f"{out}: output exists; pass --overwrite to replace it")
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputError(f"{out}: exists and is not a directory")
    parent = os.path.dirname(out)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{parent}: cannot create output folder ({exc.strerror})") from None
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{parent}: not writable")
    return out


def staging_dir(out: str) -> str:
    parent, name = os.path.split(os.path.abspath(out))
    path = os.path.join(parent, f".{name}.fgram-staging-{uuid.uuid4().hex[:12]}")
    os.makedirs(path)
    return path


def publish(staging: str, out: str) -> None:
    """Move a finished staging folder to `out`, replacing an older output atomically.

    The caller writes `_SUCCESS` into staging before this; readers that see
    `out` see either the old complete output or the new complete one.
    """
    out = os.path.abspath(out)
    if os.path.exists(out):
        parent, name = os.path.split(out)
        old = os.path.join(parent, f".{name}.fgram-old-{uuid.uuid4().hex[:12]}")
        os.rename(out, old)
        os.rename(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(staging, out)


def finish(staging: str, out: str, manifest: dict) -> None:
    """Write the manifest, then `_SUCCESS`, then publish staging as `out`."""
    from .workdir import save_json

    save_json(os.path.join(staging, "manifest.json"), manifest)
    with open(os.path.join(staging, "_SUCCESS"), "w"):
        pass
    publish(staging, out)


def discard(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
