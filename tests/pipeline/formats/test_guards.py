"""Guards against silently wrong tables: a flat file's sample that looks like text, the wrong
token width, a missing or absent separator. Clean corpora never warn."""

import os
import subprocess
import sys

import numpy as np
import pyarrow.fs as pafs
import pytest
from helpers import REPO, said
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgram.pipeline.formats.flat import flat_blocks
from fgram.pipeline.formats.guards import LONG_DOCUMENT, check_flat

FGRAM = os.path.join(os.path.dirname(sys.executable), "fgram")


def _check(tmp_path, data: bytes, dtype: str, doc_sep=None, n_items=None):
    path = str(tmp_path / "x.bin")
    with open(path, "wb") as f:
        f.write(data)
    dt = np.dtype(dtype)
    blocks = flat_blocks(pafs.LocalFileSystem(), path, len(data))
    return check_flat(path, blocks, 0, dt, n_items or len(data) // dt.itemsize, doc_sep)


def _corpus(rng, vocab: int, n: int, sep: int = 0, doc: int = 300) -> np.ndarray:
    """Zipf-ish token ids in 1..vocab-1 with separator ``sep`` between documents."""
    toks = np.minimum(rng.zipf(1.3, n), vocab - 1).astype(np.int64)
    toks[rng.random(n) < 1 / doc] = sep
    return toks


def test_text_is_not_token_ids(tmp_path):
    readme = open(os.path.join(REPO, "README.md"), "rb").read()
    found = _check(tmp_path, readme[: len(readme) // 2 * 2], "uint16", doc_sep=0)
    assert len(found) == 1 and "looks like text" in found[0]


def test_uint32_read_of_uint16_tokens(tmp_path):
    toks = _corpus(np.random.default_rng(1), 50000, 200000).astype(np.uint16)
    found = _check(tmp_path, toks.tobytes(), "uint32", doc_sep=0)
    assert len(found) == 1 and "pairs of 16-bit tokens" in found[0] and "uint16" in found[0]


def test_uint16_read_of_uint32_tokens(tmp_path):
    rng = np.random.default_rng(2)
    toks = rng.integers(1, 150000, 100000).astype(np.uint32)  # a 150K vocabulary
    found = _check(tmp_path, toks.tobytes(), "uint16", doc_sep=0)
    assert len(found) == 1 and "32-bit tokens" in found[0]


def test_a_long_single_document_names_the_separator_candidates(tmp_path):
    toks = _corpus(np.random.default_rng(3), 50000, 300000, sep=50256).astype(np.uint16)
    found = _check(tmp_path, toks.tobytes(), "uint16", n_items=LONG_DOCUMENT + 1)
    assert len(found) == 1 and "one document" in found[0] and "50256" in found[0]


def _documents(rng, lengths, sep: int, vocab: int = 30000) -> np.ndarray:
    """Documents of the given lengths (Zipf-ish ids in 1..vocab-1), each ended by sep."""
    parts = []
    for n in lengths:
        parts += [rng.zipf(1.3, n) % (vocab - 1) + 1, [sep]]
    return np.concatenate(parts).astype(np.int64)


@pytest.mark.parametrize(
    ("sep", "docs", "length", "vocab"),
    [
        (0, 250, 4000, 30000),  # ~1M tokens, below the one-long-document size
        (50256, 5, 50, 50000),  # a few hundred tokens: an end-of-text id
        (1000, 20, 100, 1000),  # an id appended after a small vocabulary
    ],
)
def test_a_separator_left_out_is_named_by_how_it_recurs_whatever_the_size(
    tmp_path, sep, docs, length, vocab
):
    rng = np.random.default_rng(sep)
    lengths = rng.integers(length * 9 // 10, length * 11 // 10, docs)
    toks = _documents(rng, lengths, sep, vocab).astype(np.uint16)
    found = _check(tmp_path, toks.tobytes(), "uint16")
    assert len(found) == 1 and f"id {sep} recurs like a separator" in found[0], found
    assert found[0].endswith(f"pass --doc-sep {sep}")
    assert _check(tmp_path, toks.tobytes(), "uint16", doc_sep=sep) == []


@pytest.mark.parametrize("seed", range(12))
def test_ordinary_ids_are_not_taken_for_separators(tmp_path, seed):
    """Ids 0 and the largest as ordinary tokens: uniform ids (the largest as rare as its
    neighbours, 0 spaced at random), and text where 0 is a word that comes in bursts
    ("!" in GPT-2's vocabulary) and never doubled."""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(200, 20000))
    uniform = rng.integers(0, vocab, int(rng.integers(20000, 400000)))
    assert _check(tmp_path, uniform.astype(np.uint16).tobytes(), "uint16") == []
    text = np.minimum(rng.zipf(1.3, 300000), vocab)
    loud = np.repeat(rng.random(300) < 0.2, 1000)  # exclaimed stretches of 1000 tokens
    bang = loud & (rng.random(300000) < 0.02)
    bang[1:] &= ~bang[:-1]  # "!!" is a token of its own
    text[bang] = 0
    assert _check(tmp_path, text.astype(np.uint16).tobytes(), "uint16") == []


def test_a_separator_that_never_occurs(tmp_path):
    toks = _corpus(np.random.default_rng(4), 300, 20000, sep=0).astype(np.uint16)
    assert _check(tmp_path, toks.tobytes(), "uint16", doc_sep=0) == []
    found = _check(tmp_path, toks.tobytes(), "uint16", doc_sep=9999)
    assert len(found) == 1 and "separator 9999 never occurs" in found[0]


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    vocab=st.integers(300, 65535),
    n=st.integers(1, 100000),
    seed=st.integers(0, 99),
    wide=st.booleans(),
)
def test_clean_corpora_never_warn(tmp_path, vocab, n, seed, wide):
    vocab = vocab * 4 if wide else vocab
    toks = _corpus(np.random.default_rng(seed), vocab, n, sep=0, doc=50)
    toks[0] = 0  # at least one separator
    dtype = "uint32" if wide else "uint16"
    assert _check(tmp_path, toks.astype(dtype).tobytes(), dtype, doc_sep=0) == []


def test_warnings_on_the_command_line_and_strict(tmp_path):
    """A warning is one line on stderr and the run goes on; --strict makes it the error."""
    toks = _corpus(np.random.default_rng(5), 30000, 100000).astype(np.uint16)
    toks.tofile(tmp_path / "c.bin")
    base = [FGRAM, "build", "--engine", "local", "--doc-sep", "0"]
    res = subprocess.run(
        [*base, str(tmp_path / "o"), str(tmp_path / "c.bin"), "--dtype", "uint32"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and said(res.stderr)[0].startswith("fgram: warning: "), res.stderr
    assert len(said(res.stderr)) == 1 and "--dtype" in res.stderr
    res = subprocess.run(
        [*base, str(tmp_path / "o2"), str(tmp_path / "c.bin"), "--dtype", "uint32", "--strict"],
        capture_output=True,
        text=True,
    )
    assert (
        res.returncode == 2
        and res.stderr.startswith("fgram: error: ")
        and "(--strict)" in res.stderr
        and not os.path.exists(tmp_path / "o2")
    )
    res = subprocess.run(
        [*base, str(tmp_path / "o3"), str(tmp_path / "c.bin")], capture_output=True, text=True
    )
    assert res.returncode == 0 and said(res.stderr) == [], res.stderr  # the right reading


def test_the_hint_names_the_id_that_ends_documents_not_the_first_known_one(tmp_path):
    """OLMo's ids: 50279 ends each document (once per ~1500 tokens, evenly), while 50256, a
    whitespace token, recurs in bursts (indented lines: a few tokens apart, never adjacent).
    Both are end-of-text ids of some tokenizer; the hint names 50279 with its count, the
    other as less even."""
    rng = np.random.default_rng(7)
    docs = []
    for _ in range(400):
        doc = rng.integers(100, 50000, int(rng.integers(1000, 2000)))
        if rng.random() < 0.05:  # a document with an indented block
            at = int(rng.integers(10, len(doc) - 40))
            doc[at : at + 40 : 4] = 50256
        docs.append(np.append(doc, 50279))
    toks = np.concatenate(docs).astype(np.uint16)
    assert 3 <= (toks == 50256).sum() < (toks == 50279).sum()
    (found,) = _check(tmp_path, toks.tobytes(), "uint16")
    assert "pass --doc-sep 50279" in found and "id 50279 recurs" in found, found
    assert "spaced as documents are" in found and "50256 (" in found.split("also")[1]
