"""Flat token files (nanoGPT, OLMo): ``.bin`` and header-less ``.npy`` memmaps are raw
little-endian arrays of ``--dtype``; a true ``.npy`` (numpy magic bytes) carries its own
dtype, and an llm.c / modded-nanogpt ``.bin`` shard its own header (1 KiB: magic,
version, token count; the magic names the width). Documents are split at
``--doc-sep``; the separator belongs to no n-gram.

A unit is a token range ``[start, stop)``, read with K-1 tokens past its end so that
every n-gram starting in it is seen once, whatever the range boundaries. Tags:
``<name>.fgid.npy`` and ``<name>.mlen.npy``, indexed exactly like the tokens (a
separator holds id -1 and length 0); each unit fills its range of the two arrays, on an
object store as one object per unit that `SidecarTags.assemble` streams into the two
files.
"""

from __future__ import annotations

import functools
import io
import os
from typing import Any, ClassVar

import numpy as np
import pyarrow.fs as pafs

from fgram.pipeline.errors import InputError
from fgram.pipeline.formats.base import (
    Match,
    ShardFormat,
    TagFile,
    TagFiles,
    Tagged,
    digest,
    even_ranges,
    mtime,
)
from fgram.pipeline.formats.guards import check_flat, report
from fgram.pipeline.formats.layouts import FGRAM, OLMO, TagLayout
from fgram.pipeline.formats.reading import (
    FLAT_DTYPES,
    ReadOptions,
    Shard,
    Stream,
    Unit,
    check_bounds,
    check_range,
    reading,
)
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.cache import local_path
from fgram.pipeline.io.storage import Location, filesystem, locate
from fgram.pipeline.kernels.keys import MAX_TOKEN
from fgram.pipeline.kernels.scratch import Scratch, work_array
from fgram.pipeline.kernels.streams import separate

NPY_MAGIC = b"\x93NUMPY"
SAMPLE_BLOCKS = 64  # checksummed 4 KiB blocks, evenly spaced (plus head and tail)


class FlatFormat(ShardFormat):
    name = "flat"
    extensions: ClassVar[tuple[str, ...]] = (".bin", ".npy")
    tag_layout = (
        "<name>.fgid.npy, <name>.mlen.npy aligned with the tokens; separators: id -1, length 0"
    )
    layouts: ClassVar[tuple[TagLayout, ...]] = (FGRAM, OLMO)

    def __init__(self) -> None:
        self.tags: TagFiles = SidecarTags()

    def reads_doc_sep(self, opts: ReadOptions) -> bool:
        return True

    def describe(
        self, fs: pafs.FileSystem, path: str, uri: str, info: pafs.FileInfo, opts: ReadOptions
    ) -> Shard:
        size = info.size
        offset, dtype = 0, FLAT_DTYPES[opts.dtype]
        blocks = flat_blocks(fs, path, size)  # the first: its head, 64 KiB
        head = blocks[0][1] if blocks and blocks[0][0] == 0 else b""
        if path.lower().endswith(".npy") and head.startswith(NPY_MAGIC):
            offset, dtype = npy_header(head, size, uri)
        elif path.lower().endswith(".bin") and (found := llmc_header(head, size, uri)):
            offset, dtype = found
        if (size - offset) % dtype.itemsize:
            raise InputError(
                uri,
                f"size {size - offset} bytes is not a multiple of {dtype} "
                f"({dtype.itemsize} bytes); wrong --dtype?",
            )
        n_items = (size - offset) // dtype.itemsize
        report(check_flat(uri, blocks, offset, dtype, n_items, opts.doc_sep), opts.strict)
        return Shard(
            uri=uri,
            format=self.name,
            size=size,
            mtime=mtime(info),
            dtype=dtype.str,
            offset=offset,
            n_items=n_items,
            checksum=digest(size, blocks),
        )

    def units(self, shard: Shard, most: int) -> list[tuple[int, int]]:
        """As few ranges as ``most`` allows, of equal size (a shard of 1.5 units: two of
        0.75, which two cores count in the same time, not 1 and 0.5)."""
        return even_ranges(shard.n_items, most)

    def tokens_in(self, shard: Shard, unit: Unit) -> int:
        return unit.stop - unit.start  # separators included

    def top_token(self, shard: Shard) -> int:
        return min(int(np.iinfo(np.dtype(shard.dtype)).max), MAX_TOKEN)

    def read(
        self,
        shard: Shard,
        unit: Unit,
        opts: ReadOptions,
        overlap: int,
        scratch: Scratch | None = None,
    ) -> Stream:
        lo = max(unit.start - 1, 0)
        arr = read_range(shard, lo, unit.stop + overlap, scratch, opts.storage)
        head = unit.start - lo  # 1 if the token before the range was read, else 0
        body = arr[head:]
        own = unit.stop - unit.start
        if opts.doc_sep is not None:
            tokens = work_array(scratch, "tokens", len(body), np.uint32)
            sep_before = head == 0 or bool(arr[0] == opts.doc_sep)
            documents, n_tokens, vmin, vmax = separate(body, opts.doc_sep, own, sep_before, tokens)
            check_bounds(vmin, vmax, shard.uri)
        else:
            vmax = check_range(body, shard.uri)
            tokens = body.astype(np.uint32)
            n_tokens = own
            documents = 1 if (unit.start == 0 and shard.n_items > 0) else 0
        return Stream(
            tokens=tokens, limit=own, documents=documents, n_tokens=n_tokens, max_token=int(vmax)
        )

    def raw_values(
        self, shard: Shard, unit: Unit, overlap: int, storage: dict[str, Any] | None
    ) -> np.ndarray | None:
        where = locate(shard.uri, storage)
        stop = min(unit.stop + overlap, shard.n_items)
        if not where.local or stop <= unit.start:
            return None
        dt = np.dtype(shard.dtype)
        offset = shard.offset + unit.start * dt.itemsize
        return np.memmap(where.path, dtype=dt, mode="r", offset=offset, shape=(stop - unit.start,))

    def tag(self, shard: Shard, unit: Unit, opts: ReadOptions, back: int, match: Match) -> Tagged:
        lo = max(unit.start - back, 0)
        raw = read_range(shard, lo, unit.stop, storage=opts.storage)
        fid, mlen = match_values(match, raw, opts.doc_sep, shard.uri)
        return Tagged(fid[unit.start - lo :], mlen[unit.start - lo :])


class SidecarTags(TagFiles):
    """Tags of flat files: two arrays aligned with a shard's tokens (`layouts.TagLayout`
    names them), filled in place by the units' tasks, or written per unit on a store and
    joined after (`assemble`); read back by any range."""

    assembles = True
    by_range = True

    def prepare(self, folder: str, shard: Shard, id_type: np.dtype, layout: TagLayout) -> None:
        for what, dtype in (("fgid", id_type), ("mlen", np.dtype(np.uint8))):
            path = os.path.join(folder, sidecar(shard, what, layout))
            if not layout.raw:
                np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(shard.n_items,))
            else:  # raw, headerless: a file of its final size, filled by the units' tasks
                with open(path, "wb") as f:
                    f.truncate(shard.n_items * dtype.itemsize)

    def write(
        self,
        tagged: Tagged,
        shard: Shard,
        unit: Unit,
        staging: Location,
        id_type: np.dtype,
        layout: TagLayout,
    ) -> None:
        if wf.on_store(staging):
            wf.save_array(part(staging, shard, unit.start, "fgid"), tagged.fid.astype(id_type))
            wf.save_array(part(staging, shard, unit.start, "mlen"), tagged.mlen)
            return
        folder = wf.local_path(staging.child("tags"))
        for what, values, dtype in (("fgid", tagged.fid, id_type), ("mlen", tagged.mlen, None)):
            path = os.path.join(folder, sidecar(shard, what, layout))
            arr = (
                np.load(path, mmap_mode="r+")
                if not layout.raw
                else np.memmap(path, dtype=dtype or np.uint8, mode="r+")
            )
            arr[unit.start : unit.stop] = values
            arr.flush()
            del arr

    def assemble(
        self,
        shard: Shard,
        starts: list[int],
        id_type: np.dtype,
        staging: Location,
        layout: TagLayout,
    ) -> None:
        """Stream the shard's per-unit tag objects, in order, into its two ``.npy``
        objects (raw files in the layouts of other trainers), one upload each."""
        for what, dtype in (("fgid", id_type), ("mlen", np.dtype(np.uint8))):
            wf.concat_arrays(
                staging.child("tags", sidecar(shard, what, layout)),
                [part(staging, shard, start, what) for start in starts],
                dtype,
                (shard.n_items,),
                header=not layout.raw,
            )

    def read(
        self,
        shard: Shard,
        unit: Unit,
        column: str,
        storage: dict[str, Any] | None,
        where: TagFile,
        layout: TagLayout,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = unit.stop - unit.start
        return self.read_range(shard, unit, 0, n, storage, where, layout)

    def read_range(
        self,
        shard: Shard,
        unit: Unit,
        a: int,
        b: int,
        storage: dict[str, Any] | None,
        where: TagFile,
        layout: TagLayout,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = unit.start + a, unit.start + b
        tokens, fid, mlen = self.maps(shard, storage, where, layout)
        raw = tokens[lo:hi] if tokens is not None else read_range(shard, lo, hi, storage=storage)
        return raw.astype(np.int64), np.asarray(fid[lo:hi]), np.asarray(mlen[lo:hi])

    def maps(
        self, shard: Shard, storage: dict[str, Any] | None, where: TagFile, layout: TagLayout
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """A shard's tokens (None on an object store: read by range) and its tags, memory
        maps indexed like its tokens (a reader keeps them for its windows)."""
        at = locate(shard.uri, storage)
        tokens = mapped(at.path, np.dtype(shard.dtype), shard.offset) if at.local else None
        fid, mlen = (
            local_path(where(f"tags/{sidecar(shard, w, layout)}")) for w in ("fgid", "mlen")
        )
        if not layout.raw:
            return tokens, mapped(fid), mapped(mlen)
        width = os.path.getsize(fid) // shard.n_items if shard.n_items else 4  # int32 or int64
        return tokens, mapped(fid, np.dtype(f"<i{width}")), mapped(mlen, np.dtype(np.uint8))


# llm.c and modded-nanogpt shards: 256 int32 (magic, version, token count, 0...), then the
# tokens; the magic names their width
LLMC_HEADER = 256 * 4
LLMC: dict[int, tuple[int, np.dtype]] = {
    20240520: (1, np.dtype("<u2")),
    20240801: (7, np.dtype("<u4")),
}


def llmc_header(head: bytes, size: int, uri: str) -> tuple[int, np.dtype] | None:
    """(header bytes, dtype) of an llm.c ``.bin`` shard from its first bytes ``head``;
    None when they are not its magic (a plain flat file). A header with that magic that
    does not parse (another version, a token count the size disagrees with) is an
    error: read as tokens, its 1 KiB would be 512 of them, silently."""
    if len(head) < 12:
        return None
    magic, version, count = (int(v) for v in np.frombuffer(head[:12], "<i4"))
    if magic not in LLMC:
        return None
    known, dtype = LLMC[magic]
    if version != known:
        raise InputError(
            uri, f"an llm.c shard header (magic {magic}) of version {version}; known: {known}"
        )
    if size - LLMC_HEADER != count * dtype.itemsize:
        raise InputError(
            uri,
            f"its llm.c header says {count} tokens ({count * dtype.itemsize} bytes after "
            f"its {LLMC_HEADER}), the file holds {size - LLMC_HEADER}: cut short or grown?",
        )
    return LLMC_HEADER, dtype


def npy_header(head: bytes, size: int, uri: str) -> tuple[int, np.dtype]:
    """(header bytes, dtype) of a true ``.npy`` file's first bytes ``head``."""
    buf = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(buf)
        reader = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _fortran, dt = reader(buf)
    except Exception as exc:  # noqa: BLE001
        raise InputError(uri, f"unreadable .npy header: {exc}") from None
    if len(shape) != 1:
        raise InputError(uri, f".npy array must be 1-D, found shape {shape}")
    if dt.kind not in "iu":
        raise InputError(uri, f".npy dtype {dt} is not an integer type")
    offset = buf.tell()
    expected = offset + shape[0] * dt.itemsize
    if size != expected:
        raise InputError(uri, f"truncated .npy: {size} bytes, header says {expected}")
    return offset, dt


def flat_blocks(fs: pafs.FileSystem, path: str, size: int) -> list[tuple[int, bytes]]:
    """(offset, bytes) of a flat file's first and last 64 KiB and SAMPLE_BLOCKS 4 KiB
    blocks evenly spaced between them: its checksum's input and `guards`' sample. With
    size and mtime the checksum tells a shard that changed in place from the one that
    was read before."""
    ends = {0, max(size - 65536, 0)}  # head and tail: 64 KiB each
    spots = ends | {i * size // (SAMPLE_BLOCKS + 1) for i in range(1, SAMPLE_BLOCKS + 1)}
    with fs.open_input_file(path) as f:
        return [(at, f.read_at(65536 if at in ends else 4096, at)) for at in sorted(spots)]


def read_range(
    shard: Shard,
    lo: int,
    hi: int,
    scratch: Scratch | None = None,
    storage: dict[str, Any] | None = None,
) -> np.ndarray:
    """Raw token values [lo, hi) of a flat file (clipped to the file), read in one call
    (into ``scratch``'s "raw" buffer when given)."""
    with reading(shard.uri):
        fs, path = filesystem(shard.uri, storage)
        dt = np.dtype(shard.dtype)
        lo, hi = max(lo, 0), min(hi, shard.n_items)
        with fs.open_input_file(path) as f:
            if scratch is None:
                arr = np.frombuffer(
                    f.read_at((hi - lo) * dt.itemsize, shard.offset + lo * dt.itemsize), dtype=dt
                )
            else:
                arr = scratch.get("raw", hi - lo, dt)
                f.seek(shard.offset + lo * dt.itemsize)
                view, got = arr.view(np.uint8), 0
                while got < len(view):
                    m = f.readinto(view[got:])
                    if not m:
                        break
                    got += m
                arr = arr[: got // dt.itemsize]
    if len(arr) != hi - lo:
        raise InputError(shard.uri, "file shrank while being read")
    return arr


def mapped(path: str, dtype: np.dtype | None = None, offset: int = 0) -> np.ndarray:
    """A local file memory-mapped read-only: a ``.npy`` (no ``dtype``) or raw values
    from ``offset``; kept open while the file is the same (its size and mtime)."""
    st = os.stat(path)
    return _mapped(path, st.st_size, st.st_mtime_ns, None if dtype is None else dtype.str, offset)


@functools.lru_cache(maxsize=64)
def _mapped(path: str, size: int, mtime: int, dtype: str | None, offset: int) -> np.ndarray:
    if dtype is None:
        arr: np.ndarray = np.load(path, mmap_mode="r")
        return arr
    n = (size - offset) // np.dtype(dtype).itemsize
    return np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=(n,))


def match_values(
    match: Match, raw: np.ndarray, doc_sep: int | None, uri: str
) -> tuple[np.ndarray, np.ndarray]:
    """Tags of a flat token range: separators get id -1 and length 0."""
    if doc_sep is None:
        check_range(raw, uri)
        return match(raw)
    sep = np.flatnonzero(raw == doc_sep)
    if len(sep) < len(raw):
        check_range(np.delete(raw, sep), uri)
    starts = np.unique(np.concatenate([sep, sep + 1]))
    fid, mlen = match(raw, doc_starts=starts[starts < len(raw)])
    fid[sep] = -1
    mlen[sep] = 0
    return fid, mlen


def sidecar(shard: Shard, what: str, layout: TagLayout) -> str:
    """The name of a flat shard's tags file ``what`` (fgid, mlen) in a tags folder, by
    its layout (`layouts.TagLayout.sidecar`)."""
    return layout.sidecar(os.path.basename(shard.uri), what)


def part(staging: Location, shard: Shard, start: int, what: str) -> Location:
    """A flat shard's tags of the unit at ``start``, before `SidecarTags.assemble` joins them."""
    return staging.child("_work", "parts", f"{os.path.basename(shard.uri)}.{start:012d}.{what}.npy")
