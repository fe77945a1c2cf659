"""What a file's name says it holds as text (JSON Lines, plain or compressed; Parquet;
``.txt``), for finding a folder's inputs (token shards: `registry.token_file`)."""

from __future__ import annotations

import os

PARQUET = (".parquet", ".pq")
JSONL = (".jsonl", ".json", ".ndjson")
TEXT = (".txt",)
COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
TEXT_HINT = "; it holds text: build with --tokenizer tokenizer.json, or tokenize it first"


def text_kind(name: str) -> tuple[str, str | None] | None:
    """(kind, compression) of a file name, None for one that holds no text fgram reads."""
    low = os.path.basename(name).lower()
    stem, ext = os.path.splitext(low)
    compression = COMPRESSION.get(ext)
    if compression is not None:
        if stem.endswith(JSONL + TEXT):
            return ("txt" if stem.endswith(TEXT) else "jsonl"), compression
        return ("jsonl", compression) if compression == "zstd" else None
    if low.endswith(JSONL):
        return "jsonl", None
    if low.endswith(TEXT):
        return "txt", None
    if low.endswith(PARQUET):
        return "parquet", None
    return None


TEXT_FILES = "text files (.jsonl[.gz|.zst], .parquet, .txt)"


def is_text_file(name: str) -> bool:
    """Whether a file in an input folder is text fgram reads (by its name). A bare
    ``.json`` is not: in a folder it is metadata (tokenizer.json, dataset_info.json);
    named, or matched by a glob, it is read as JSON Lines."""
    return text_kind(name) is not None and not name.lower().endswith(".json")
