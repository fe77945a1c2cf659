"""A generated corpus with realistic, heavy-tailed n-gram statistics.

Text is drawn as a sequence of *phrases*: a phrase book of random token
sequences (lengths 1..8) whose popularity is Zipfian, with tokens themselves
drawn from a Zipfian vocabulary. Frequent phrases make frequent n-grams of
every length, rare ones make the long tail, and phrase joins make the
cross-phrase n-grams that real text has. Documents have geometric lengths.
Everything is vectorised and generated in chunks, so 1B tokens stream to disk.

As text (``fmt="text"``), token id i is a made-up word (`word`), documents are their
words joined by spaces, written as JSON Lines in zstd, and ``tokenizer.json`` beside
them is a Hugging Face word-level tokenizer that gives back exactly those ids: the
text path of the same corpus.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

CHUNK = 1 << 24
EOS = "<|endoftext|>"  # id 0 of a text corpus's tokenizer, the separator of a flat one
_CONSONANTS, _VOWELS = "bdfghklmnprstvz", "aeiou"
_SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]


def word(i: int) -> str:
    """Token id i >= 1 of a text corpus as a word: its digits in base 75, a syllable each."""
    out = []
    while True:
        i, digit = divmod(i, len(_SYLLABLES))
        out.append(_SYLLABLES[digit])
        if i == 0:
            return "".join(reversed(out))


def write_tokenizer(path: str, vocab: int) -> None:
    """A word-level tokenizer.json: id 0 the end-of-text token, id i `word(i)`, id
    ``vocab`` the unknown word (the `text` extra)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {EOS: 0, **{word(i): i for i in range(1, vocab)}, "[UNK]": vocab}
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([EOS])
    tok.save(path)


def _zipf_ranks(rng: np.random.Generator, n: int, size: int, a: float) -> np.ndarray:
    """Draws in [0, n) with P(r) ~ 1/(r+1)^a (inverse-CDF on a precomputed table)."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** a
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)


class PhraseBook:
    def __init__(self, vocab: int, seed: int, phrases: int | None = None, first_token: int = 1):
        rng = np.random.default_rng(seed)
        self.vocab = vocab
        n = phrases or max(1000, min(4_000_000, vocab * 20))
        self.lengths = rng.choice(
            np.arange(1, 9), size=n, p=np.array([30, 25, 18, 11, 7, 4, 3, 2]) / 100.0
        )
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        span = vocab - first_token
        self.tokens = (first_token + _zipf_ranks(rng, span, int(self.lengths.sum()), 1.05)).astype(
            np.uint32
        )
        # shuffle which token id gets which popularity rank, so ids are not sorted by frequency
        perm = rng.permutation(span).astype(np.uint32) + first_token
        self.tokens = perm[self.tokens - first_token]
        self.n = n

    def sample(self, rng: np.random.Generator, n_tokens: int) -> np.ndarray:
        """About n_tokens tokens of concatenated phrases (exactly n_tokens returned)."""
        mean = float(self.lengths.mean())
        out, have = [], 0
        while have < n_tokens:
            picks = _zipf_ranks(rng, self.n, int((n_tokens - have) / mean * 1.1) + 16, 1.0)
            lens = self.lengths[picks]
            starts = self.starts[picks]
            total = int(lens.sum())
            offs = np.repeat(starts - (np.cumsum(lens) - lens), lens)
            idx = np.arange(total, dtype=np.int64) + offs
            out.append(self.tokens[idx])
            have += total
        return np.concatenate(out)[:n_tokens]


def generate(
    out_dir: str,
    tokens: int,
    vocab: int = 50_000,
    seed: int = 0,
    fmt: str = "parquet",
    doc_len: int = 512,
    files: int | None = None,
    book_seed: int | None = None,
) -> dict[str, Any]:
    """Write a corpus of `tokens` tokens to out_dir. Returns its description (also meta.json).

    The phrase book comes from ``book_seed`` (default: ``seed``), the text drawn
    from it from ``seed``: one book and two seeds make two corpora of one
    distribution. Flat format: one uint16 (vocab <= 65536) or uint32 `.bin` file per shard,
    documents separated by id 0, which is never used inside a document. Parquet: columns
    doc_id int64, tokens list<int32>, one document per row.
    """
    import json

    if tokens < 0 or vocab < 2:
        raise ValueError("tokens must be >= 0 and vocab >= 2")
    if fmt == "text" and vocab > 65535:
        raise ValueError("a text corpus has at most 65535 words (--vocab)")
    os.makedirs(out_dir, exist_ok=True)
    book_seed = seed if book_seed is None else book_seed
    book = PhraseBook(vocab, book_seed)
    rng = np.random.default_rng(seed + 1)
    nfiles = files or max(1, min(64, tokens // (64 * CHUNK) + 1))
    per_file = [tokens // nfiles + (1 if i < tokens % nfiles else 0) for i in range(nfiles)]
    dtype = np.uint16 if vocab <= 65536 else np.uint32
    n_docs = 0
    names = []
    words = np.array(["", *(word(i) for i in range(1, vocab if fmt == "text" else 1))], object)
    ext = {"bin": "bin", "text": "jsonl.zst"}.get(fmt, "parquet")
    for f, count in enumerate(per_file):
        name = f"part-{f:05d}.{ext}"
        names.append(name)
        path = os.path.join(out_dir, name)
        n_docs += _write_file(path, count, book, rng, fmt, dtype, words, doc_len, n_docs)
    if fmt == "text":
        write_tokenizer(os.path.join(out_dir, "tokenizer.json"), vocab)
    meta = {
        "tokens": tokens,
        "documents": n_docs,
        "vocab": vocab,
        "seed": seed,
        "book_seed": book_seed,
        "format": fmt,
        "files": names,
        "dtype": np.dtype(dtype).name if fmt == "bin" else "int32",
        "tokenizer": "tokenizer.json" if fmt == "text" else None,
        "doc_sep": 0 if fmt == "bin" else None,
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
    return meta


def _write_file(
    path: str,
    count: int,
    book: PhraseBook,
    rng: np.random.Generator,
    fmt: str,
    dtype: Any,
    words: np.ndarray,
    doc_len: int,
    doc_id: int,
) -> int:
    """One file of ``count`` tokens in documents of mean length ``doc_len`` (ids from
    ``doc_id``), written aside and renamed; returns its documents."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fgram.pipeline.formats.table import arrow_array, arrow_list

    tmp, docs, writer = path + ".tmp", 0, None
    with open(tmp, "wb") as raw, _text_stream(raw, fmt) as fh:
        left = count
        while left > 0:
            n = min(CHUNK, left)
            left -= n
            toks = book.sample(rng, n)
            lens = rng.geometric(1.0 / doc_len, size=n // max(doc_len // 4, 1) + 2)
            ends = np.cumsum(lens)
            ends = ends[ends < n]
            lens = np.diff(np.concatenate([[0], ends, [n]]))
            lens = lens[lens > 0]
            if fmt == "bin":
                flat = np.zeros(n + len(lens), dtype=dtype)
                sep_at = np.cumsum(lens) + np.arange(len(lens))
                mask = np.ones(len(flat), bool)
                mask[sep_at] = False
                flat[mask] = toks
                fh.write(flat.tobytes())
            elif fmt == "text":
                ends = np.cumsum(lens)
                texts = (" ".join(words[toks[e - n : e]]) for e, n in zip(ends, lens, strict=True))
                fh.write("".join(f'{{"text": "{t}"}}\n' for t in texts).encode())
            else:
                arr = arrow_list(np.concatenate([[0], np.cumsum(lens)]), toks, np.int32)
                ids = arrow_array(
                    np.arange(doc_id + docs, doc_id + docs + len(lens), dtype=np.int64)
                )
                batch = pa.table({"doc_id": ids, "tokens": arr})
                if writer is None:
                    writer = pq.ParquetWriter(fh, batch.schema, compression="zstd")
                writer.write_table(batch, row_group_size=1 << 20)
            docs += len(lens)
        if writer is not None:
            writer.close()
    os.replace(tmp, path)
    return docs


def _text_stream(raw: Any, fmt: str) -> Any:
    """Where a shard's bytes go: ``raw`` itself, or a zstd stream into it (text)."""
    import contextlib

    if fmt != "text":
        return contextlib.nullcontext(raw)
    import zstandard

    return zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=False)


def make_corpus(
    output: str,
    tokens: int,
    vocab: int,
    seed: int,
    book_seed: int | None,
    fmt: str,
    files: int | None,
    overwrite: bool,
) -> dict[str, Any]:
    """`fgram synth` (and `fgram.synth`): its checks, then `generate` into a new folder
    (an existing non-empty one only with ``overwrite``, its files removed first)."""
    import shutil

    from fgram.pipeline.errors import ConfigError, OutputError
    from fgram.pipeline.io.storage import is_remote

    if is_remote(output):
        raise ConfigError(f"{output}: synth writes a local folder (upload it afterwards)")
    if fmt not in ("parquet", "bin", "text"):
        raise ConfigError(f"--format must be parquet, bin or text, got {fmt!r}")
    if tokens < 1:
        raise ConfigError(f"--tokens must be >= 1, got {tokens}")
    top = 65535 if fmt == "text" else 2**31 - 1
    if not 2 <= vocab <= top:
        raise ConfigError(f"--vocab must be in 2..{top}, got {vocab}")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        if not overwrite:  # another corpus's shards would stay beside the new ones
            raise OutputError(f"{os.path.abspath(output)}: exists; pass --overwrite to replace it")
        shutil.rmtree(output) if os.path.isdir(output) else os.remove(output)
    return generate(
        output, tokens, vocab=vocab, seed=seed, fmt=fmt, files=files, book_seed=book_seed
    )
