"""The README's "Training with fgram's tags" and "Serving a SCONE model" snippets, and
the OLMo dataset of docs/formats.md, run as they are written, over the outputs their
text names (a small generated corpus of uint16 `.bin` shards, separator 0). A snippet
that imports torch or transformers is skipped without them (optional extras)."""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fgram
from fgram.pipeline.formats.synth import generate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blocks(doc: str, *sections: str) -> list[str]:
    """The ```python blocks under the given ``## `` headings of a markdown file."""
    text = open(os.path.join(REPO, doc)).read()
    found = []
    for name in sections:
        body = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        found += [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", body, re.S)]
    assert found, f"no python blocks under {sections} in {doc}"
    return found


SNIPPETS = blocks("README.md", "Training with fgram's tags", "Serving a SCONE model")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """What the README's commands make: shards/, fgrams (with its index and the rows of
    the `hashed` model), tags and tags-olmo."""
    d = tmp_path_factory.mktemp("readme")
    generate(str(d / "shards"), 300_000, vocab=5000, seed=0, fmt="bin", files=1)
    read = dict(dtype="uint16", doc_sep=0, engine="local")
    fgram.build(d / "fgrams", [d / "shards"], size=100_000, **read)
    fgram.index(d / "fgrams")
    fgram.annotate(d / "fgrams", [d / "shards"], d / "tags", **read)
    fgram.annotate(d / "fgrams", [d / "shards"], d / "tags-olmo", layout="olmo", **read)
    fgram.embed(d / "fgrams", model="fgram.pipeline.models:hashed", engine="local")
    return d


def _needs(code: str) -> None:
    for package in ("torch", "transformers"):
        imported = re.search(rf"^\s*(from|import) {package}\b", code, re.M)
        if imported and importlib.util.find_spec(package) is None:
            pytest.skip(f"the snippet needs {package} (an optional extra)")


@pytest.mark.parametrize("i", range(len(SNIPPETS)))
def test_a_readme_snippet_runs_as_written(outputs, i):
    code = SNIPPETS[i]
    _needs(code)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=outputs, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"{code}\n{res.stderr}"


def test_the_olmo_dataset_of_the_docs_reads_the_olmo_layout(outputs):
    """docs/formats.md's dataset over raw token memmaps and the olmo layout's files gives
    each window's tokens and tags as FgramTags has them (uncut)."""
    (code,) = [b for b in blocks("docs/formats.md", "Tags for training: `fgram annotate`, "
               "`fgram coverage`") if "class FgramTokens" in b]  # fmt: skip
    _needs(code)
    space: dict = {}
    exec(compile(code, "docs/formats.md", "exec"), space)
    shard = str(outputs / "shards" / "part-00000.bin")
    ds = space["FgramTokens"]([shard], [str(outputs / "tags-olmo" / "tags" / "part-00000")], 256)
    tags = fgram.FgramTags.open(outputs / "tags")
    assert len(ds) == len(tags) // 256
    for i in (0, 1, len(ds) - 1):
        item = ds[i]
        tokens, ids, lens = tags._raw(i * 256, 256)  # as written: matches uncut
        assert np.array_equal(item["input_ids"].numpy(), tokens)
        assert np.array_equal(item["fgram_ids"].numpy(), ids)
        assert np.array_equal(item["match_len"].numpy(), lens)
