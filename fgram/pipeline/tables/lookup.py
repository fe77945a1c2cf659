"""`fgram lookup` (and `fgram.lookup`): the longest f-gram at each position of one
context, and its embedding row where the table has embeddings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fgram.pipeline.errors import ConfigError
from fgram.pipeline.kernels.keys import MAX_TOKEN

if TYPE_CHECKING:
    from fgram.pipeline.io.storage import Location

INTERPRETED_UP_TO = 4096  # a context this short is matched by the interpreter (`interpreted`)


def context_ids(tokens: Iterable[int] | str) -> list[int]:
    """Token ids given as a list, or as text separated by commas or spaces."""
    if isinstance(tokens, str):
        try:
            return [int(t) for t in tokens.replace(",", " ").split()]
        except ValueError:
            raise ConfigError(
                f"--tokens {tokens!r}: expected token ids separated by commas or spaces"
            ) from None
    return [int(t) for t in tokens]


def look_up(
    table: Location,
    tokens: Iterable[int] | str | None,
    text: str | None,
    tokenizer: str | None,
    mode: str,
    backend: str,
    storage: dict[str, Any] | None,
    check: bool = True,
    canonical: bool = False,
) -> dict[str, Any]:
    """See `fgram.api.lookup`."""
    from fgram.pipeline.tables.embed import FgramStore
    from fgram.pipeline.tables.index import FgramIndex
    from fgram.pipeline.tables.versions import open_table
    from fgram.pipeline.text.tokenizer import (
        check_tokenizer,
        encode_text,
        known_tokenizer,
        load_spec,
        table_tokenizer,
    )

    if (tokens is None) == (text is None):
        raise ConfigError("give the context as --tokens IDS or as --text TEXT (with --tokenizer)")
    from fgram.pipeline.text.canonical import mapped, meet_canonical

    manifest = open_table(table, storage)[1]
    token_map = meet_canonical(manifest, canonical, tokenizer, table.uri, "lookup")
    tok = table_tokenizer(tokenizer, manifest)
    if text is not None:
        if tok is None:
            raise ConfigError(
                "--text needs --tokenizer tokenizer.json (the table's manifest names none here)"
            )
        if tokenizer:
            check_tokenizer(manifest, load_spec(tokenizer).record(), tokenizer, table.uri)
        path = tokenizer or known_tokenizer(manifest)
        assert path is not None  # `tok` was made from it
        ids = encode_text(path, backend, text)
    else:
        assert tokens is not None
        ids = context_ids(tokens)
        vocab = (manifest.get("tokenizer") or {}).get("vocab_size") or MAX_TOKEN + 1
        if tok is not None:
            vocab = tok.get_vocab_size(with_added_tokens=True)
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ConfigError(
                f"--tokens: {bad[0]} is not a token id of the table's vocabulary (0..{vocab - 1})"
            )
    from fgram.pipeline.tables.versions import resolve_table

    loc = resolve_table(table, storage)  # one version for the index and the rows
    index = FgramIndex.open(loc, mode=mode, storage=storage, check=check)
    store: FgramStore | None = None  # matches only: no embeddings (`fgram embed`)
    if loc.child("embeddings", "embeddings.json").exists():  # damaged ones are an error
        store = FgramStore.open(loc, mode=mode, storage=storage, check=check)
    # a table of canonical ids is matched by the context's canonical ids
    context = ids if token_map is None else mapped(token_map, ids, table.uri)
    short = len(context) <= INTERPRETED_UP_TO
    fid, lengths = index.match(context, interpreted=short)
    matches: list[Any] = []
    for i in range(len(ids)):
        gram = ids[i - int(lengths[i]) + 1 : i + 1]
        matches.append(None if fid[i] < 0 else (tok.decode(gram) if tok else gram))
    return {
        "tokens": ids,
        "fgram_ids": np.asarray(fid, np.int64),
        "match_len": np.asarray(lengths, np.int64),
        "matches": matches,
        "rows": None if store is None else store.rows(np.asarray(fid), interpreted=short),
        "text": tok is not None,
    }
