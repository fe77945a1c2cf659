"""`fgram engram-audit`'s options."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fgram.pipeline.config.options import PLACED, Options, option, parse_counts, storage_option

if TYPE_CHECKING:
    from fgram.pipeline.io.storage import Location


@dataclass
class EngramAuditConfig(Options):
    """`fgram engram-audit`."""

    # a table built with --canonical (a build output, a version, a refresh folder)
    table: Location = field(metadata=PLACED)
    engram: str = option(
        dataclasses.MISSING,
        "The Engram configuration: a TOML or JSON file with the demo's field names "
        "(engram_vocab_size, max_ngram_size, n_head_per_ngram, layer_ids, pad_id, seed).",
        metavar="CONFIG",
    )
    sizes: list[int] | None = option(
        None,
        "Table sizes of the curve (buckets per head, every order's; e.g. 100K,1M,10M); "
        "default: ten from 1/16 of the configuration's first size to 32 times it.",
        parse=parse_counts,
        metavar="S,S,...",
    )
    storage: dict[str, Any] = storage_option()
