"""Text in: reading documents, tokenizers and their backends, canonical ids, and the
token shards `fgram tokenize` writes (above the token formats, below the configs)."""
