"""A Hugging Face tokenizer (``tokenizer.json``, the `text` extra): found, identified by
its content, shipped to workers as its JSON text, and run on batches of documents."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from fgram.pipeline.errors import ConfigError

EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eos|>", "[SEP]")


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(
            "tokenizing needs the 'tokenizers' package: pip install 'fgram[text]'"
        ) from None
    return tokenizers


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer as a task carries it: its JSON text and what identifies it."""

    json: str
    name: str  # the file's folder name, or the file's name
    path: str
    sha256: str
    vocab_size: int
    eos_id: int | None  # its end-of-document token, when it names one
    backend: str = "tokenizers"  # what encodes with it (`backends.choose`)

    def record(self) -> dict[str, Any]:
        from fgram.pipeline.text.backends import backend

        return {
            "name": self.name,
            "path": self.path,
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "backend": self.backend,
            "backend_version": backend(self.backend).version(),
        }


def tokenizer_file(path: str) -> str:
    """``path`` itself, or the ``tokenizer.json`` in the folder ``path``."""
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such tokenizer file (a tokenizer.json, or its folder)")
    return path


_LOADED: dict[str, Any] = {}  # this process's tokenizer, by its sha256 and backend
_REFERENCE: dict[str, Any] = {}  # and tokenizers' beside a fast backend's


def load_spec(path: str) -> TokenizerSpec:
    """Read and check a tokenizer; its EOS token from a ``tokenizer_config.json`` beside
    it (``eos_token``), else from its special tokens' usual names."""
    file = tokenizer_file(path)
    with open(file, "rb") as f:
        raw = f.read()
    text = raw.decode("utf-8", errors="replace")
    try:
        tok = _library().Tokenizer.from_str(text)
    except Exception as exc:  # noqa: BLE001 - one line
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(f"{file}: not a tokenizer.json ({why})") from None
    folder = os.path.dirname(os.path.abspath(file))
    eos = _config_eos(tok, os.path.join(folder, "tokenizer_config.json"))
    if eos is None:
        specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
        eos = next((tok.token_to_id(n) for n in EOS_NAMES if n in specials), None)
    name = os.path.basename(folder) if os.path.basename(file) == "tokenizer.json" else file
    spec = TokenizerSpec(
        json=text,
        name=os.path.basename(name),
        path=os.path.abspath(file),
        sha256=hashlib.sha256(raw).hexdigest(),
        vocab_size=int(tok.get_vocab_size(with_added_tokens=True)),
        eos_id=eos,
    )
    _keep(spec.sha256, "tokenizers", tok)  # the driver's own tasks need not parse it again
    return spec


def table_tokenizer(given: str | None, manifest: dict[str, Any]) -> Any:
    """The tokenizer ``given`` (a path), else the one a table's manifest names (made from
    `fgram tokenize` output) when its file is on this machine with the same content and
    the `text` extra is installed; else None. A bad ``given`` is a one-line error."""
    if given:
        return tokenizer(load_spec(given))
    import importlib.util

    path = known_tokenizer(manifest)
    if path is None or importlib.util.find_spec("tokenizers") is None:
        return None
    return tokenizer(load_spec(path))


def encode_text(path: str, backend: str, text: str) -> list[int]:
    """One text's ids (no special tokens) by the tokenizer at ``path`` through ``backend``
    (``auto``: the fastest installed one proven on hard cases and this text, as a run's)."""
    spec = load_spec(path)
    if backend != "tokenizers":
        spec = prove(spec, backend, [("--text", text)], False)
    _, ids = encode(encoder(spec), [text])
    return [int(i) for i in ids]


def check_tokenizer(
    table: dict[str, Any], given: dict[str, Any] | None, what: str, where: str
) -> None:
    """Tokens meet a table: ``given`` (a tokenizer's record: name, sha256; None when the
    tokens do not say) must be the tokenizer the table's manifest names, when it names
    one. Another one's ids mean other words: a match against them is silently wrong."""
    ours = table.get("tokenizer") or {}
    if not given or not ours.get("sha256") or given.get("sha256") == ours["sha256"]:
        return
    raise ConfigError(
        f"{what}: tokenized with {given.get('name')} (sha256 {str(given.get('sha256'))[:12]}), "
        f"but {where} was built with {ours.get('name')} (sha256 {ours['sha256'][:12]}): "
        f"its token ids mean other words; use that tokenizer"
    )


def known_tokenizer(manifest: dict[str, Any]) -> str | None:
    """The path of the tokenizer a table's manifest names, when its file is on this
    machine with the same content (sha256); else None."""
    from fgram.pipeline.io.cache import file_sha256

    rec = manifest.get("tokenizer") or {}
    path = rec.get("path")
    if not path or not os.path.isfile(path) or file_sha256(path) != rec.get("sha256"):
        return None
    return str(path)


def _config_eos(tok: Any, config: str) -> int | None:
    if not os.path.isfile(config):
        return None
    try:
        with open(config) as f:
            token = json.load(f).get("eos_token")
    except (OSError, ValueError):
        return None
    if isinstance(token, dict):
        token = token.get("content")
    found = tok.token_to_id(token) if isinstance(token, str) else None
    return int(found) if found is not None else None


@dataclass(frozen=True)
class Encoder:
    """A spec's tokenizer loaded by its backend (`backends`)."""

    backend: str
    tok: Any
    json: str  # the tokenizer's text: the reference is made from it where needed


def tokenizer(spec: TokenizerSpec, threads: int = 0) -> Any:
    """The spec's tokenizer (``tokenizers``' object), made once per process; with
    ``threads`` > 0 its thread pool sized so (`backends.size_threads`)."""
    return encoder(dataclasses.replace(spec, backend="tokenizers"), threads).tok


def encoder(spec: TokenizerSpec, threads: int = 0) -> Encoder:
    """The spec's tokenizer in its backend, made once per process. ``threads`` > 0
    sizes the backend's thread pool (read once, when a process first encodes a batch:
    a process that encoded before keeps its pool); 0 leaves the library's default
    (every core)."""
    from fgram.pipeline.text.backends import backend, size_threads

    chosen = backend(spec.backend)
    size_threads(chosen, threads)
    key = f"{spec.sha256}:{spec.backend}"
    if key not in _LOADED:
        _keep(spec.sha256, spec.backend, chosen.load(spec.json))
    return Encoder(spec.backend, _LOADED[key], spec.json)


def _keep(sha256: str, backend: str, tok: Any) -> None:
    """Keep a made tokenizer for this process (one tokenizer's, in each backend)."""
    if any(not k.startswith(f"{sha256}:") for k in _LOADED):
        _LOADED.clear()
    _LOADED[f"{sha256}:{backend}"] = tok


def prove(
    spec: TokenizerSpec, requested: str, samples: list[tuple[str, str]], special: bool
) -> TokenizerSpec:
    """The spec with the backend a run uses (`backends.choose`), the tokenizers made
    for the proof kept for this process's own tasks."""
    from fgram.pipeline.text.backends import choose

    made = {"tokenizers": _LOADED.get(f"{spec.sha256}:tokenizers")}
    name = choose(requested, spec.json, samples, special, made)
    if name in made and made[name] is not None:
        _keep(spec.sha256, name, made[name])
    return dataclasses.replace(spec, backend=name)


def encode(enc: Encoder, texts: list[str], special: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Documents -> (token counts int64, all their ids uint32, concatenated), without
    the tokenizer's special tokens unless ``special``; the backend's own threads encode
    the batch."""
    from fgram.pipeline.text.backends import TOKENIZERS, backend

    if enc.backend == TOKENIZERS.name:
        return TOKENIZERS.encode(enc.tok, texts, special)
    try:
        return backend(enc.backend).encode(enc.tok, texts, special)
    except Exception:  # noqa: BLE001 - a batch it cannot encode: the reference's ids
        return TOKENIZERS.encode(_reference(enc), texts, special)


def _reference(enc: Encoder) -> Any:
    """``tokenizers``' own tokenizer beside a fast backend's (made once per process)."""
    key = f"reference:{id(enc.tok)}"
    if key not in _REFERENCE:
        _REFERENCE.clear()
        _REFERENCE[key] = _library().Tokenizer.from_str(enc.json)
    return _REFERENCE[key]
