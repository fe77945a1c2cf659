"""`fgram clean`: what fgram leaves on disk besides its outputs, listed, and removed on demand.

- The cache (``$FGRAM_CACHE_DIR``, else ``~/.cache/fgram``): the JVM's class
  archives (at most 3 kept, `spark.KEEP_ARCHIVES`, 70-180 MB each), copies of
  object-store arrays (``remote/``, at most ``$FGRAM_CACHE_MAX`` bytes, default
  32G) and the local staging of object-store runs (``remote-runs/``, removed
  when a run finishes; a killed run's stays for ``--resume``).
- Beside outputs in the given folders: a killed run's staging folder
  (``.NAME.fgram-staging``), an interrupted publish's old output
  (``.NAME.fgram-old-*``), a stale lock (``.NAME.fgram-lock``), an embed's
  staging (``embeddings.staging``).

Nothing that a live run holds is listed: a run marks the folder it works in
(`locks.working_in`, an flock the kernel drops when the process dies), and a
staging folder named after an output whose lock is live is that run's too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass

from fgram.pipeline.io.cache import cache_dir

LEFTOVER = re.compile(r"^\.(?P<name>.+)\.fgram-(?P<what>staging|text|old|copy|lock)(-[0-9a-f]+)?$")


@dataclass
class Entry:
    path: str
    kind: str
    bytes: int


def _size(path: str) -> int:
    if os.path.isfile(path) or os.path.islink(path):
        try:
            return os.lstat(path).st_size
        except OSError:
            return 0
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def cache_entries() -> list[Entry]:
    root = cache_dir()
    out = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith("spark-classes-"):
            out.append(Entry(path, "JVM class archive", _size(path)))
        elif name == "remote" and os.listdir(path):
            out.append(
                Entry(path, f"copies of object-store files ({len(os.listdir(path))})", _size(path))
            )
        elif name.startswith("hs_err_pid") and name.endswith(".log"):
            out.append(Entry(path, "Spark JVM's crash report", _size(path)))
        elif name == "checked" and os.listdir(path):
            n = len(os.listdir(path))
            out.append(Entry(path, f"marks of files checked on open ({n})", _size(path)))
        elif name == "remote-runs":
            out += [
                Entry(p, "object-store run's staging", _size(p))
                for p in (os.path.join(path, n) for n in sorted(os.listdir(path)))
                if not _held(p)
            ]
    return out


def _held(staging: str) -> bool:
    """Whether the run that a staging folder belongs to still runs: it works there
    (`locks.is_live`), or the lock of the output it is named after is live."""
    from fgram.pipeline.io.locks import FileLock, is_live

    if os.path.isdir(staging) and is_live(staging):
        return True
    m = LEFTOVER.match(os.path.basename(staging))
    if m is None:
        return False
    out = os.path.join(os.path.dirname(staging), m.group("name"))
    return FileLock(out).held() is not None


def _embed_held(staging: str) -> bool:
    """Whether a live embed writes a table's ``embeddings.staging``: it holds the lock of
    ``embeddings`` (taken before the folder exists) or works in it."""
    from fgram.pipeline.io.locks import FileLock

    out = os.path.join(os.path.dirname(staging), "embeddings")
    return _held(staging) or FileLock(out).held() is not None


def leftovers(folders: list[str]) -> list[Entry]:
    """What killed or interrupted runs left in ``folders`` (and one level below them)."""
    out = []
    for top in folders:
        for folder in [top] + [
            os.path.join(top, n)
            for n in sorted(os.listdir(top))
            if os.path.isdir(os.path.join(top, n)) and not n.startswith(".")
        ]:
            for name in sorted(os.listdir(folder)):
                path = os.path.join(folder, name)
                m = LEFTOVER.match(name)
                if m is not None and not _held(path):
                    kind = {
                        "staging": "unfinished run's work (--resume would use it)",
                        "text": "unfinished build's tokens (--resume would use them)",
                        "old": "interrupted publish's old output",
                        "copy": "interrupted publish's copy (of a --work-dir elsewhere)",
                        "lock": "stale lock",
                    }[m.group("what")]
                    out.append(Entry(path, kind, _size(path)))
                elif name == "embeddings.staging" and not _embed_held(path):
                    out.append(Entry(path, "unfinished embed's rows", _size(path)))
    return out


def remove(entries: list[Entry]) -> None:
    for e in entries:
        if os.path.isdir(e.path) and not os.path.islink(e.path):
            shutil.rmtree(e.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(e.path)
