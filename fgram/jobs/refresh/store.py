"""The refresh store: immutable content objects (``TABLE/store/objects/``, .npy arrays
named at random, cached per machine when on an object store), what keys them (the
store's key code and options) and their garbage collection (objects that no kept
version's ``store.json`` names)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field

import numpy as np

from fgram.pipeline.config.commands import BuildConfig
from fgram.pipeline.errors import FgramError, OutputError
from fgram.pipeline.formats.inputs import shard_record
from fgram.pipeline.formats.reading import Shard
from fgram.pipeline.formats.registry import format_of
from fgram.pipeline.io import workdir as wf
from fgram.pipeline.io.cache import cache_dir, keep_copy, local_path
from fgram.pipeline.io.publish import here
from fgram.pipeline.io.storage import Location
from fgram.pipeline.io.workdir import (
    load_array,
    load_json,
    matches,
    npy_names,
    object_name,
    object_record,
    save_array,
)
from fgram.pipeline.kernels.keys import KeyCode
from fgram.pipeline.records import JsonRecord, int_keys, optional
from fgram.pipeline.tables import versions as vs
from fgram.version import __version__

STORE_FORMAT = 3  # 3: the store's key code depends on the shards' token width
STORE_OPTIONS = (
    "max_len",
    "min_count",
    "size",
    "column",
    "dtype",
    "doc_sep",
    "samples_are_documents",
)


@dataclass
class Level(JsonRecord):
    """One length's aggregate and id table. A run is ``{"keys", "counts", "n"}`` (two
    objects and their length); a piece, a run of one key range (``lo``, ``hi``)."""

    base: list[dict] = field(default_factory=list)  # pieces, by key range
    delta: list[dict] = field(default_factory=list)  # what changed since the base (signed)
    table: dict | None = None  # T_k: {"size", "chunks": [{"keys", "ids", "tokens", "n"}]}


@dataclass
class ShardEntry(JsonRecord):
    """What the store keeps of one input shard (keyed by `shard_digest`)."""

    record: dict  # `inputs.shard_record`
    totals: dict[str, int]  # documents, tokens
    partials: dict[int, list[dict]] = field(default_factory=dict)  # length -> its runs
    # [start, stop, object, w] per unit and window length w: where its w-grams had no id
    # when it was counted (an older store's [start, stop, object]: w = 2)
    rare: list[list] | None = optional()

    @classmethod
    def restore(cls, values: dict) -> dict:
        return {**values, "partials": int_keys(values.get("partials", {}))}


@dataclass
class StoreRecord(JsonRecord):
    """A version's ``store.json``: the partial counts a later refresh reuses."""

    FORMAT = STORE_FORMAT

    options: dict  # `store_options`: other options start the store afresh
    levels: dict[int, Level] = field(default_factory=dict)
    shards: dict[str, ShardEntry] = field(default_factory=dict)
    fgram_version: str = __version__

    @classmethod
    def restore(cls, values: dict) -> dict:
        return {
            **values,
            "levels": {int(k): Level.from_json(v) for k, v in values.get("levels", {}).items()},
            "shards": {d: ShardEntry.from_json(e) for d, e in values.get("shards", {}).items()},
        }


def objects_dir(root: Location) -> Location:
    """The store's objects."""
    return root.child("store", "objects")


def put(root: Location, arr: np.ndarray) -> str:
    """Write an immutable object (a .npy file) into the store; returns its name, which
    carries its data's size and checksum (`object_record`). On an object store this
    machine keeps its copy in the cache (`cache.keep_copy`)."""
    folder = objects_dir(root)
    scratch = folder.path if folder.local else cache_dir("remote")
    tmp = os.path.join(scratch, f".{uuid.uuid4().hex}.tmp")
    name = object_name(save_array(here(tmp), arr))
    dest = folder.child(name)
    if folder.local:
        os.replace(tmp, dest.path)
    else:
        dest.upload(here(tmp))
        keep_copy(dest, tmp)
    return name


def get(root: Location, name: str, mmap: bool = True) -> np.ndarray:
    """An object of the store, checked against the record its name carries; from an
    object store through this machine's cache (the objects never change: each is
    fetched once per machine)."""
    if not OBJECT_FILE.match(name):  # a store.json's name: never a path out of the store
        raise FgramError(f"{objects_dir(root).uri}: names {name!r}, not a store object's name")
    src = objects_dir(root).child(name)
    arr = load_array(here(local_path(src)), mmap=mmap)
    rec = object_record(name)
    if rec is not None and not matches(arr, rec, legacy=True):
        raise FgramError(
            f"{src.uri}: a store object not as it was written (damaged since); "
            "refresh into a new folder"
        )
    return arr


def shard_digest(shard: Shard) -> str:
    return hashlib.sha256(json.dumps(shard_record(shard), sort_keys=True).encode()).hexdigest()[:32]


def store_code(shards: list[Shard]) -> KeyCode:
    """The store's key code: 32 bits of prefix id and 16 of last token when every shard
    is a flat file of 16-bit tokens (a unit's count then sorts one word per position,
    docs/internals.md), else 32 + 32. Another code starts the store afresh."""
    small = bool(shards) and all(format_of(s).top_token(s) < 2**16 for s in shards)
    return KeyCode(32, 16 if small else 32)


def store_options(cfg: BuildConfig, code: KeyCode) -> dict:
    rec = cfg.record()
    return {
        "format": STORE_FORMAT,
        **{k: rec[k] for k in STORE_OPTIONS},
        "key_bits": [code.prefix_bits, code.last_bits],
        # counted over canonical ids: the map's sha256 (a store of another map starts afresh)
        **({"canonical": rec["token_map"]} if rec.get("token_map") else {}),
    }


referenced = npy_names  # every object name a version's store.json uses


OBJECT_FILE = re.compile(r"^([0-9a-f]{32}(\.\d+\.x?[0-9a-f]{16})?\.npy|\.[0-9a-f]{32}\.tmp)$")


def collect_garbage(root: Location) -> int:
    """Delete objects that no finished version's store.json names (a crashed or
    pruned refresh's). Call with the refresh lock held. Returns how many."""
    keep: set[str] = set()
    for vid in vs.list_versions(root):
        path = vs.version_path(root, vid).child("store.json")
        if wf.exists(path):
            keep |= referenced(load_json(path))
    folder = objects_dir(root)
    if wf.is_link(folder):  # `check_root` refuses it first
        raise OutputError(f"{folder.uri}: a link; refresh deletes nothing outside its folder")
    # only what a refresh writes there: its objects and a killed put's temporary files
    doomed = [n for n in wf.names(folder) if n not in keep and OBJECT_FILE.match(n)]
    for name in doomed:
        wf.remove(folder.child(name))
    return len(doomed)


def put_run(root, keys, counts, **extra) -> dict:
    """A sorted (keys, counts) run written as two objects, with its length."""
    return {"keys": put(root, keys), "counts": put(root, counts), "n": len(keys), **extra}


def put_chunk(root, keys, ids, tokens) -> dict:
    return {
        "keys": put(root, keys),
        "ids": put(root, ids),
        "tokens": put(root, tokens),
        "n": len(ids),
    }
