"""Tokenizer backends: what encodes a run's documents with a ``tokenizer.json``.

``tokenizers`` (Hugging Face's, the reference) or ``fastokens`` (a Rust byte-level BPE
that gives the same ids many times faster). A run picks one (`choose`): ``auto`` takes
the fastest installed backend that loads this tokenizer and is *proven* identical for
it: before the first task, it encodes a fixed set of hard cases (runs of spaces and
newlines, mixed scripts, emoji with joiners, control characters, the tokenizer's
added and special tokens inside text) and a sample of the run's own documents, and
every id must equal ``tokenizers``'. A difference is one warning line naming the
backend and the first differing document, and the run tokenizes with ``tokenizers``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.pipeline.errors import ConfigError

HARD_CASES = [
    "",
    " ",
    "      leading spaces and trailing      ",
    "\n\n\n\nnewlines\n\n\t\ttabs\r\n\r\nand returns\n",
    " " * 300 + "x" + "\n" * 200,
    "日本語のテキスト, 中文文本, 한국어 텍스트 and English in one line",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, ไทย",
    "emoji 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🙂‍↔️ ✌︎ and flags 🇩🇪🇯🇵",
    "control \x00\x01\x07\x1b[31m\x7f\u200b\u200d\ufeff characters",
    "accents: café naïve Å Å (composed and decomposed)",
    "code:\n    def f(x):\n        return x ** 2  # comment\n\tif (a && b) { c++; }",
    "numbers 1234567890 3.14159 1e-10 0x1F 1,000,000",
    "a" * 5000,
    "don't won't I'm we'll they've it's 'quoted' \"double\"",
    "mixed\u00a0spaces\u2003and\u3000ideographic",
    "".join(map(chr, range(1, 0x250))),  # every byte of UTF-8's first two widths
]


@dataclass(frozen=True)
class Backend:
    """One backend: its package, how it loads a tokenizer's JSON text, and how it
    encodes a batch -> (token counts int64, all ids uint32, concatenated)."""

    name: str
    package: str
    load: Callable[[str], Any]
    encode: Callable[[Any, list[str], bool], tuple[np.ndarray, np.ndarray]]
    thread_vars: tuple[str, ...]  # the environment its thread pool is sized by

    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"


def _tokenizers_load(text: str) -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(
            "tokenizing needs the 'tokenizers' package: pip install 'fgram[text]'"
        ) from None
    return tokenizers.Tokenizer.from_str(text)


def _tokenizers_encode(tok: Any, texts: list[str], special: bool) -> tuple[np.ndarray, np.ndarray]:
    run = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    ids = [np.asarray(e.ids, dtype=np.uint32) for e in run(texts, add_special_tokens=special)]
    lengths = np.array([len(a) for a in ids], dtype=np.int64)
    return lengths, (np.concatenate(ids) if ids else np.zeros(0, np.uint32))


def _fastokens_load(text: str) -> Any:
    import fastokens

    tok = fastokens.Tokenizer.from_json_str(text)
    tok.enable_segment_cache(0)  # no cache: memory bounded by the batch alone
    return tok


def _fastokens_encode(tok: Any, texts: list[str], special: bool) -> tuple[np.ndarray, np.ndarray]:
    ids, offsets = tok.encode_batch_flat(texts, add_special_tokens=special)
    ends = np.frombuffer(offsets, "<u8").astype(np.int64)
    return np.diff(ends), np.frombuffer(ids, "<u4")  # read-only, not copied


TOKENIZERS = Backend(
    "tokenizers", "tokenizers", _tokenizers_load, _tokenizers_encode, ("RAYON_NUM_THREADS",)
)
FASTOKENS = Backend(
    "fastokens",
    "fastokens",
    _fastokens_load,
    _fastokens_encode,
    ("RAYON_NUM_THREADS", "FASTOKENS_BPE_THREADS"),
)
BACKENDS: dict[str, Backend] = {"fastokens": FASTOKENS, "tokenizers": TOKENIZERS}  # fastest first
CHOICES = ("auto", *BACKENDS)


def backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ConfigError(f"unknown tokenizer backend {name!r} (known: {', '.join(CHOICES)})")
    return BACKENDS[name]


def hard_cases(tokenizer_json: str) -> list[str]:
    """The fixed cases, and the tokenizer's added tokens inside text."""
    try:
        added = [t["content"] for t in json.loads(tokenizer_json).get("added_tokens") or []]
    except (ValueError, TypeError, KeyError):
        added = []
    inside = [f"before{a}after {a} {a}{a}\n{a}" for a in added[:64] if a]
    return HARD_CASES + inside


def first_difference(
    fast: Backend, reference: Any, candidate: Any, docs: list[tuple[str, str]], special: bool
) -> str | None:
    """Where ``candidate``'s ids first differ from ``reference``'s (``tokenizers``) over
    ``docs`` (label, text): the document's label and the start of its text; None when
    every id is the same."""
    texts = [t for _, t in docs]
    want_len, want = _tokenizers_encode(reference, texts, special)
    got_len, got = fast.encode(candidate, texts, special)
    if np.array_equal(want_len, got_len) and np.array_equal(want, got):
        return None
    ends_w, ends_g = np.cumsum(want_len), np.cumsum(got_len)
    for i, (label, text) in enumerate(docs):
        a = want[ends_w[i] - want_len[i] : ends_w[i]]
        b = got[ends_g[i] - got_len[i] : ends_g[i]] if i < len(got_len) else np.zeros(0)
        if not np.array_equal(a, b):
            return f"{label} ({text[:40]!r}...)"
    return "the batch (its documents' counts differ)"


def choose(
    requested: str,
    tokenizer_json: str,
    samples: list[tuple[str, str]],
    special: bool,
    loaded: dict[str, Any] | None = None,
) -> str:
    """The backend a run uses (`module docs`): ``requested`` (auto, or a backend's
    name) proven on the hard cases and ``samples`` (label, text) of the run's own
    documents; ``tokenizers`` when no other is proven, with one warning line when a
    backend was tried and differed. ``loaded``: tokenizers already made, by backend
    name (the reference's is used, the proven one's is put there)."""
    if requested == "tokenizers":
        return "tokenizers"
    if requested == "auto":
        tried = [b for b in BACKENDS.values() if b is not TOKENIZERS and b.installed()]
    else:
        tried = [backend(requested)]
        if not tried[0].installed():
            raise ConfigError(
                f"--tokenizer-backend {requested}: the package {tried[0].package} is not "
                f"installed (pip install 'fgram[text]')"
            )
    loaded = {} if loaded is None else loaded
    reference = loaded.get("tokenizers") or _tokenizers_load(tokenizer_json)
    docs = [(f"hard case {i}", t) for i, t in enumerate(hard_cases(tokenizer_json))] + samples
    for fast in tried:
        try:
            candidate = fast.load(tokenizer_json)
        except Exception as exc:  # noqa: BLE001 - not for this tokenizer: the next one
            if requested != "auto":
                why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
                sys.stderr.write(
                    f"fgram: warning: the {fast.name} backend cannot load this tokenizer "
                    f"({why}); tokenizing with tokenizers\n"
                )
            continue
        try:
            where = first_difference(fast, reference, candidate, docs, special)
        except Exception as exc:  # noqa: BLE001 - it cannot encode what tokenizers does
            if requested == "auto":  # not this tokenizer's backend, as if it did not load
                continue
            why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            where = f"a document it could not encode ({why})"
        if where is None:
            loaded[fast.name] = candidate
            return fast.name
        sys.stderr.write(
            f"fgram: warning: the {fast.name} backend's ids differ from tokenizers' on "
            f"{where}; tokenizing with tokenizers\n"
        )
    return "tokenizers"


def size_threads(chosen: Backend, threads: int) -> None:
    """Size the backend's thread pool (read when a process first encodes: a process
    that encoded before keeps its pool); 0 leaves the library's default."""
    if threads > 0:
        for var in chosen.thread_vars:
            os.environ[var] = str(threads)
