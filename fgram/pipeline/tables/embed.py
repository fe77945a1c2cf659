"""Precomputed f-gram embeddings: the on-disk format, models, and the lookup store.

Format (``OUT/embeddings/``, written by ``fgram embed``)
--------------------------------------------------------
- ``matrix.npy``: ``[S, d]``, row i = the model's output for f-gram i
  (fgram_id order). dtype float16 or float32; bfloat16 is stored as uint16
  (the top half of each float32, rounded to nearest even).
- ``embeddings.json``: ``{"format": "fgram-embeddings", "version": 1, "rows":
  S, "dim": d, "dtype": "float16"|"bfloat16"|"float32", "model": "module:factory",
  "table": <manifest fingerprint>, "sha256": <of matrix.npy>, "chunk_rows": R}``.
  On an object store the matrix is an object of its own generation, named with its
  sha256 and size in ``"files": {"matrix.npy": {"object", "sha256", "bytes"}}``.

A model is a factory (``module:factory``, called with no arguments) that
returns a callable ``model(tokens, lengths) -> array [B, d]``: ``tokens`` int32
``[B, K]`` right-padded with 0, ``lengths`` int64 ``[B]``.
"""

from __future__ import annotations

import importlib
import inspect
import mmap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fgram.pipeline.config.options import OPEN_MODE
from fgram.pipeline.errors import ConfigError, FgramError
from fgram.pipeline.io.storage import Location
from fgram.pipeline.kernels import jit
from fgram.pipeline.kernels.matching import gather_rows, last_matches, step_matches
from fgram.pipeline.tables.index import (
    FgramIndex,
    check_mode,
    damaged,
    part_arrays,
    read_meta,
    unchecked,
    verify_whole,
)
from fgram.pipeline.tables.versions import manifest_fingerprint, resolve_table

DTYPES = ("float16", "bfloat16", "float32")


def model_factory(spec: str) -> Callable[..., Any]:
    """The factory ``module:factory`` names, imported (not called): a wrong spec is one
    line before anything else is checked."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"--model {spec!r}: expected module:factory")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--model {spec!r}: {exc}") from None
    if not callable(factory):
        raise ConfigError(f"--model {spec!r}: {name} is not callable")
    return factory  # type: ignore[no-any-return]


def load_model(spec: str, device: str | None = None) -> Callable[..., Any]:
    """``module:factory`` -> the model callable: ``factory()``, or ``factory(device=...)``
    when a device is asked for (the factory must take a ``device`` argument then)."""
    factory = model_factory(spec)
    if device is None:
        model: Callable[..., Any] = factory()
        return model
    if "device" not in inspect.signature(factory).parameters:
        raise ConfigError(f"--model {spec!r}: the factory takes no device argument (--device)")
    model = factory(device=device)
    return model


def to_stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """float array -> the stored representation of ``dtype``."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bfloat16":
        u = x.view(np.uint32).astype(np.uint64)
        u += 0x7FFF + ((u >> 16) & 1)  # round to nearest even
        return (u >> 16).astype(np.uint16)
    return x.astype(dtype)


def from_stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """Stored rows -> float32."""
    if dtype == "bfloat16":
        wide: np.ndarray = (np.asarray(x, np.uint32) << np.uint32(16)).view(np.float32)
        return wide
    return np.asarray(x, dtype=np.float32)


def storage_dtype(dtype: str) -> np.dtype:
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return np.dtype(np.uint16 if dtype == "bfloat16" else dtype)


class FgramStore:
    """Embedding lookups for inference. ``FgramStore.open(OUT, mode="ram"|"mmap")``.

    Every lookup finds the longest f-gram ending at a position (the index) and
    returns its row; where nothing matches, ``unmatched`` is True and the row
    is zeros: the caller uses its own token embedding there.
    """

    def __init__(
        self,
        index: FgramIndex,
        matrix: np.ndarray,
        meta: dict[str, Any],
        vocab_size: int | None = None,
    ):
        self.index, self.matrix, self.meta = index, matrix, meta
        self.dim, self.max_len = meta["dim"], index.max_len
        self.vocab_size = vocab_size  # the table's tokenizer's ids, where its manifest says
        # the compiled row gather copies bits: an unsigned view of the same width
        self._bits = matrix.view(np.dtype(f"u{matrix.dtype.itemsize}"))

    @classmethod
    def open(
        cls,
        out: str | Location,
        mode: str = OPEN_MODE,
        storage: dict[str, Any] | None = None,
        verify: bool = False,
        check: bool = True,
    ) -> FgramStore:
        """``out``: a build output or a refresh folder, a path or a URI (``storage``: its
        storage options). ``"ram"`` reads the matrix into memory; ``"mmap"`` reads rows
        from disk on demand (from an object store: from a local copy in the cache,
        checked against its sha256). The matrix and the index's arrays are checked
        against their XXH3 on open (``check``, as `FgramIndex.open`; ``check=False`` for
        a store larger than memory, with a warning naming what is unchecked).
        ``verify``: every byte of the table, its index and embeddings checked against its
        sha256 first (`index.verify_whole`)."""
        check_mode(mode)
        loc = resolve_table(out, storage)
        if verify:
            verify_whole(loc)
        folder = loc.child("embeddings")
        meta = read_meta(
            folder.child("embeddings.json"),
            "fgram-embeddings",
            1,
            f"fgram embed {loc.uri} --model ...",
        )
        if manifest_fingerprint(loc) != meta["table"]:
            raise FgramError(
                f"{loc.uri}: the embeddings were computed for another f-gram "
                f"table; rerun `fgram embed`"
            )
        matrix = part_arrays(folder, meta, mode, check)("matrix.npy")  # mmap: a plain view
        if not check:
            unchecked(folder.uri)
        if matrix.shape != (meta["rows"], meta["dim"]):
            raise FgramError(
                f"{folder.uri}/matrix.npy: shape {matrix.shape} does not match "
                f"embeddings.json ({meta['rows']}, {meta['dim']})"
            )
        mapped = getattr(matrix.base, "_mmap", None)
        if mode == "mmap" and matrix.size and mapped is not None and hasattr(mmap, "MADV_RANDOM"):
            mapped.madvise(mmap.MADV_RANDOM)  # rows are read one by one at random
        manifest = loc.child("manifest.json").read_json()
        vocab = (manifest.get("tokenizer") or {}).get("vocab_size")
        return cls(FgramIndex.open(loc, mode=mode, check=check), matrix, meta, vocab)

    def rows(self, ids: np.ndarray, interpreted: bool = False) -> np.ndarray:
        """Rows of fgram ids in the stored dtype (float32 for bfloat16); zeros where an id is
        -1. ``interpreted``: the gather's code run by the interpreter (a few rows, no
        compiled code loaded: `jit.interpreted`)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.dim), self.matrix.dtype)
        gather = jit.interpreted(gather_rows) if interpreted else gather_rows
        gather(self._bits, ids, out.view(self._bits.dtype))
        return from_stored(out, "bfloat16") if self.meta["dtype"] == "bfloat16" else out

    def embed_sequence(
        self, tokens: ArrayLike, doc_starts: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Prefill: every position at once -> (rows [n, d], match lengths [n], unmatched [n])."""
        fid, mlen = self.index.match(tokens, doc_starts)
        return self.rows(fid), mlen, fid < 0

    def embed_last(
        self, contexts: np.ndarray | Sequence[ArrayLike]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decoding: for each context (a token sequence; or one 2-D array [B, T]), the
        row of the longest f-gram ending at its last token -> (rows [B, d], match
        lengths [B], unmatched [B])."""
        window = self.max_len
        if isinstance(contexts, np.ndarray) and contexts.ndim == 2 and contexts.shape[1]:
            ix = self.index
            fid = np.empty(len(contexts), np.int64)
            mlen = np.empty(len(contexts), np.uint8)
            if last_matches(contexts[:, -window:], ix.arrays, fid, mlen):
                raise damaged(ix.where)
            return self.rows(fid), mlen, fid < 0
        flat, starts, last = [], [], []
        at = 0
        for ctx in contexts:
            tail = np.asarray(ctx, dtype=np.int64)[-window:]
            if len(tail) == 0:
                raise ValueError("embed_last: an empty context has no last token")
            flat.append(tail)
            starts.append(at)
            at += len(tail)
            last.append(at - 1)
        fid, mlen = self.index.match(np.concatenate(flat), doc_starts=starts, lanes=1)
        at_last = np.array(last, dtype=np.int64)
        return self.rows(fid[at_last]), mlen[at_last], fid[at_last] < 0

    def start(self, batch: int = 1) -> dict[str, Any]:
        """State for incremental decoding of ``batch`` sequences (nothing seen yet)."""
        return {
            "id": np.full(batch, -1, np.int64),
            "len": np.zeros(batch, np.int64),
            "prev": np.zeros(batch, np.int64),
        }

    def step(
        self, state: dict[str, np.ndarray], tokens: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One new token per sequence -> (rows [B, d], match lengths [B], unmatched [B]).

        Extends each sequence's previous match, shortening it by suffix links on a
        miss: at most K-1 lookups per token, the batch's done side by side.
        """
        tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(tok) != len(state["id"]):
            raise ValueError(f"step: {len(tok)} tokens for a batch of {len(state['id'])}")
        if step_matches(state["id"], state["len"], state["prev"], tok, self.index.arrays):
            raise damaged(self.index.where)
        state["prev"] = tok.copy()
        fid = np.where(state["len"] >= 2, state["id"], -1)
        return self.rows(fid), np.maximum(state["len"], 1).astype(np.uint8), fid < 0
