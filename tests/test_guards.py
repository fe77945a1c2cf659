"""Guards against silently wrong tables: a flat file's sample that looks like text, the wrong
token width, a missing or absent separator. Clean corpora never warn."""

import os
import subprocess
import sys

import numpy as np
import pyarrow.fs as pafs
from helpers import said
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
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md"), "rb").read()
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
    assert len(found) == 1 and "one document" in found[0] and "50256 (" in found[0]
    short = _check(tmp_path, toks.tobytes(), "uint16")  # a shorter file: no opinion
    assert short == []


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
