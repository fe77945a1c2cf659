"""fgram's cache on this machine: local copies of object-store files (for memory
mapping), bounded in bytes, the least recently used deleted first."""

from __future__ import annotations

import hashlib
import os
import re
import uuid

from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.io.failures import endpoint_of
from fgram.pipeline.io.storage import Location


def cache_dir(*parts: str) -> str:
    """fgram's local cache (``$FGRAM_CACHE_DIR``, else ``~/.cache/fgram``), made on demand."""
    root = os.environ.get("FGRAM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "fgram"
    )
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


CACHE_MAX = "FGRAM_CACHE_MAX"  # bytes of object-store copies kept (default 32G)


DEFAULT_CACHE_MAX = 32 * 2**30


def file_record(path: str) -> dict[str, int | str]:
    """A local file's ``bytes``, ``sha256`` and ``xxh3`` (XXH3-64 of its bytes, hex: what a
    reader checks when it opens the file, at memory speed), in one read."""
    import xxhash

    sha, fast = hashlib.sha256(), xxhash.xxh3_64()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            sha.update(block)
            fast.update(block)
    return {"bytes": os.path.getsize(path), "sha256": sha.hexdigest(), "xxh3": fast.hexdigest()}


def file_xxh3(path: str) -> str:
    """XXH3-64 of a local file's bytes, hex (`file_record`'s ``xxh3``), read through a
    memory map: at memory speed where its pages are cached."""
    import mmap

    import xxhash

    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return xxhash.xxh3_64(b"").hexdigest()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return xxhash.xxh3_64(mapped).hexdigest()


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'512M', '2G', '1048576' -> bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"not a size: {text!r} (examples: 512M, 2G, 1048576)")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def cache_limit() -> int:
    return parse_size(os.environ.get(CACHE_MAX) or DEFAULT_CACHE_MAX)


def cached_copy(obj: Location, sha256: str, size: int) -> str:
    """A local copy of an object-store file, for memory mapping: kept in the cache's
    ``remote/`` folder under its sha256 (so one content is fetched once, whatever its
    URI), checked against it when downloaded. The folder holds at most `cache_limit`
    bytes: the least recently used copies are deleted first (a process that maps one
    keeps its pages)."""
    folder = cache_dir("remote")
    path = os.path.join(folder, f"{sha256}.npy")
    if os.path.exists(path) and os.path.getsize(path) == size:
        os.utime(path)  # its time is its last use
        return path
    _evict(folder, cache_limit() - size)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    obj.download(tmp)
    if file_sha256(tmp) != sha256:
        os.remove(tmp)
        raise FgramError(f"{obj.uri}: checksum mismatch (corrupt, or changed while read)")
    os.replace(tmp, path)
    return path


def immutable_copy(obj: Location) -> str:
    """A local copy of an object that never changes once written (a refresh store's
    objects, which have names of their own), in the cache's ``remote/`` folder under a
    digest of its URI: fetched once per machine (`keep_copy` spares even that for what
    this machine wrote), bounded with `cached_copy`'s copies."""
    path = _immutable_path(obj)
    if os.path.exists(path):
        os.utime(path)
        return path
    size = obj.info().size or 0
    _evict(os.path.dirname(path), cache_limit() - size)
    obj.download(path)
    return path


def local_path(loc: Location) -> str:
    """A path on this machine holding the bytes of ``loc``, a file that never changes once
    written: its own path, or its `immutable_copy`."""
    return loc.path if loc.local else immutable_copy(loc)


def keep_copy(obj: Location, local_path: str) -> None:
    """Keep ``local_path``, the file just uploaded as ``obj``, as its `immutable_copy`."""
    path = _immutable_path(obj)
    _evict(os.path.dirname(path), cache_limit() - os.path.getsize(local_path))
    os.replace(local_path, path)


def _immutable_path(obj: Location) -> str:
    # the endpoint too: one bucket name on two stores is two buckets
    digest = hashlib.sha256(f"{obj.uri}{endpoint_of(dict(obj.options))}".encode()).hexdigest()[:32]
    return os.path.join(cache_dir("remote"), f"obj-{digest}-{obj.name}")


def _evict(folder: str, room: int) -> None:
    """Delete the least recently used copies until the rest take at most ``room`` bytes."""
    entries = []
    for name in os.listdir(folder):
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, name))
    total = sum(e[1] for e in entries)
    for _, size, name in sorted(entries):
        if total <= max(room, 0):
            break
        try:
            os.remove(os.path.join(folder, name))
            total -= size
        except OSError:
            pass
