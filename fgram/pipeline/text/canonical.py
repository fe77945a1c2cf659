"""Engram's canonical ("compressed") token ids: ids whose text, decoded alone, is equal
after normalising share one (`canonical_map`, as the public demo `deepseek-ai/Engram`
computes them), and how tokens meet a table counted over them (`meet_canonical`)."""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from typing import Any

import numpy as np

from fgram.pipeline.errors import ConfigError, InputError


def canonical_map(tokenizer: Any) -> tuple[np.ndarray, int]:
    """``(canonical id of each token id int64[vocab], number of canonical ids)`` of a
    tokenizer: a folder or a ``tokenizer.json`` path, or a loaded ``transformers`` or
    ``tokenizers`` tokenizer. Each id is decoded alone (``skip_special_tokens=False``);
    a text holding U+FFFD is keyed by the token's own string, any other by its text
    normalised (NFKC, NFD, accents stripped, lower case, runs of space/tab/CR/LF one
    space, a lone space kept, stripped; empty: the text itself); equal keys share an id,
    numbered in order of first appearance. With ``transformers`` installed a path is read
    as the demo reads it (``AutoTokenizer``, its ``tokenizer_config.json`` included);
    without it, by ``tokenizers``, whose decode skips the config's
    ``clean_up_tokenization_spaces``: a tokenizer that sets it may map differently."""
    tok = _load(tokenizer)
    decode, to_token = _decoder(tok)
    n = len(tok) if hasattr(tok, "convert_ids_to_tokens") else tok.get_vocab_size(True)
    keys: dict[str, int] = {}
    lookup = np.empty(n, np.int64)
    for tid in range(n):
        text = decode(tid)
        key = to_token(tid) if "\ufffd" in text else (normalized(text) or text)
        lookup[tid] = keys.setdefault(key, len(keys))
    return lookup, len(keys)


def _load(tokenizer: Any) -> Any:
    if not isinstance(tokenizer, str | os.PathLike):
        return tokenizer
    path = os.fspath(tokenizer)
    try:
        import transformers
    except ImportError:
        from tokenizers import Tokenizer

        file = path if os.path.isfile(path) else os.path.join(path, "tokenizer.json")
        return Tokenizer.from_file(file)
    if os.path.isfile(path):
        fast: Any = transformers.PreTrainedTokenizerFast  # typed untyped where installed
        return fast(tokenizer_file=path)
    return transformers.AutoTokenizer.from_pretrained(path)


def _decoder(tok: Any) -> tuple[Any, Any]:
    if hasattr(tok, "convert_ids_to_tokens"):  # transformers
        return (
            lambda i: tok.decode([i], skip_special_tokens=False),
            tok.convert_ids_to_tokens,
        )
    return (lambda i: tok.decode([i], skip_special_tokens=False), tok.id_to_token)


# Unicode's White_Space characters: what a strip removes (Python's own ``str.strip`` also
# takes the information separators U+001C..U+001F)
WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)
_RUNS = re.compile(r"[ \t\r\n]+")


def normalized(text: str) -> str:
    """A decoded token's key text (`canonical_map`): NFKC, NFD, nonspacing marks removed
    (accents), lower case, each run of space/tab/CR/LF one space, then stripped of
    white space unless it is exactly one space."""
    text = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    text = "".join(c for c in text if unicodedata.category(c) != "Mn").lower()
    text = _RUNS.sub(" ", text)
    return text if text == " " else text.strip(WHITE_SPACE)


def map_sha256(lookup: np.ndarray) -> str:
    """A canonical map's sha256: of its ids as little-endian int64."""
    return hashlib.sha256(np.asarray(lookup).astype("<i8").tobytes()).hexdigest()


def canonical_record(path: str) -> tuple[np.ndarray, dict[str, Any]]:
    """The canonical map of the tokenizer at ``path`` and its record in a manifest: the
    map's ``sha256`` (little-endian int64), ``size`` (canonical ids), ``vocab_size`` and
    ``tokenizer`` (the path)."""
    lookup, size = canonical_map(path)
    return lookup, {
        "sha256": map_sha256(lookup),
        "size": int(size),
        "vocab_size": len(lookup),
        "tokenizer": path,
    }


def meet_canonical(
    manifest: dict[str, Any], canonical: bool, tokenizer: str | None, where: str, what: str
) -> np.ndarray | None:
    """The map tokens go through to meet the table of ``manifest`` (at ``where``): None
    for a table of ids as they are; for a table counted over canonical ids (``build
    --canonical``), the canonical map (uint32, as `mapped` and a stream's reader take it)
    of ``tokenizer`` (the tokens' own) or else of the table's tokenizer, which must be the
    table's map (its sha256). ``canonical``: the caller asked for it (``--canonical``); a
    table and tokens meet only under one map."""
    ours = manifest.get("canonical")
    if not ours:
        if canonical:
            raise ConfigError(
                f"{where}: a table of token ids as they are (built without --canonical); "
                f"{what} it without --canonical"
            )
        return None
    if not canonical:
        raise ConfigError(
            f"{where}: a table of Engram's canonical token ids (build --canonical); {what} "
            f"it with --canonical, which maps the tokens to canonical ids first"
        )
    path = tokenizer or (ours["tokenizer"] if os.path.exists(ours.get("tokenizer", "")) else None)
    if path is None:
        raise ConfigError(
            f"{where}: its canonical map's tokenizer ({ours.get('tokenizer')}) is not on this "
            f"machine: give --tokenizer"
        )
    lookup, record = canonical_record(path)
    if record["sha256"] != ours["sha256"]:
        raise ConfigError(
            f"{what}: the tokens' canonical map (of {path}, sha256 {record['sha256'][:12]}) is "
            f"not {where}'s (sha256 {ours['sha256'][:12]}): they would meet under another map"
        )
    return lookup.astype(np.uint32)


def mapped(token_map: np.ndarray, tokens: Any, where: str) -> np.ndarray:
    """``tokens``' canonical ids (uint32) by ``token_map`` (uint32, `meet_canonical`), as a
    stream's reader maps them (`kernels.streams.map_tokens`); an id past the map is one
    line naming ``where``."""
    from fgram.pipeline.kernels.streams import map_tokens

    out = np.array(tokens, dtype=np.uint32)
    if map_tokens(out, token_map) == -2:
        raise InputError(where, f"token id {int(np.max(tokens))} past the canonical map's "
                         f"{len(token_map)} ids")  # fmt: skip
    return out
