"""The layouts a tags output can have (`fgram annotate --layout`), each an object that says
how its files are named and what they hold; the formats ask it and never compare its name.
Plain Python: the command line's options read it without importing the formats."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class TagLayout:
    """How a tags output lays out its files, for the trainer that reads them."""

    name: str
    about: str  # what `--layout` says of it
    own: bool = False  # fgram's own: each format says what its files hold (the manifest)
    raw: bool = False  # headerless ``<stem>.<what>.bin`` files, named after the inputs' stems
    indexed: bool = False  # an IndexedDataset ``.idx`` beside each raw file (Megatron's)
    tokens_beside: bool = False  # the tokens written beside their tags (``input_ids``)

    def sidecar(self, name: str, what: str) -> str:
        """The name of a flat input's tags file ``what`` (fgid, mlen) for an input file
        named ``name``: ``<name>.<what>.npy``, or raw ``<stem>.<what>.bin``."""
        if self.raw:
            return f"{os.path.splitext(name)[0]}.{what}.bin"
        return f"{name}.{what}.npy"

    def tag_name(self, name: str) -> str:
        """What a tags file is named after, for an input named ``name`` (two inputs that
        give the same are refused)."""
        return os.path.splitext(name)[0] if self.raw else name


FGRAM = TagLayout(
    "fgram",
    "fgram's own: .npy sidecars of flat files, a Parquet file per unit of row formats",
    own=True,
)
OLMO = TagLayout(
    "olmo",
    "raw headerless <stem>.fgid.bin (int32) and <stem>.mlen.bin (uint8) beside each "
    "flat token file, of its length (OLMo-core's memmaps; flat, Megatron, datatrove inputs)",
    raw=True,
)
MEGATRON = TagLayout(
    "megatron",
    "a sibling IndexedDataset per Megatron input: <prefix>.fgid.bin/.idx (int32) "
    "and <prefix>.mlen.bin/.idx (uint8), the input's sequence lengths and documents",
    raw=True,
    indexed=True,
)
HF = TagLayout(
    "hf",
    "Parquet a Hugging Face `datasets` loads: input_ids, fgram_ids and match_len "
    "lists per row, the input's other columns kept (Parquet, Arrow, MDS, LitData inputs)",
    tokens_beside=True,
)

LAYOUTS: dict[str, TagLayout] = {t.name: t for t in (FGRAM, OLMO, MEGATRON, HF)}
