"""The README's commands run as written (but its installs: this environment is the one
they make), and the guide's own-corpus section end to end (tokenize -> build -> index ->
coverage -> report -> annotate -> embed -> lookup, then its Python), over text it makes,
with the snippets of docs/training.md, docs/engram.md and the OLMo dataset of
docs/formats.md over what those commands made: the docs are the test. The text is the
synthetic corpus's words with a tokenizer whose end-of-text id is not 0 (as OLMo's,
50279, is not), so that no option written for separator 0 passes by chance. A snippet
that imports torch or transformers is skipped without them (optional extras)."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fgram

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 5000  # words 1..4999; the tokenizer's [UNK] is 0 and its end-of-text 5000


def section(doc: str, name: str) -> str:
    text = open(os.path.join(REPO, doc)).read()
    return text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]


def blocks(doc: str, *sections: str, lang: str = "python") -> list[str]:
    """The ```lang blocks under the given ``## `` headings of a markdown file."""
    found = []
    for name in sections:
        body = section(doc, name)
        found += [textwrap.dedent(b) for b in re.findall(rf"```{lang}\n(.*?)```", body, re.S)]
    assert found, f"no {lang} blocks under {sections} in {doc}"
    return found


OWN = "Your own corpus, end to end"
(COMMANDS,) = blocks("docs/guide.md", OWN, lang="bash")
SNIPPETS = [
    *blocks("docs/guide.md", OWN),
    *blocks("docs/training.md", "Training with fgram's tags", "Serving a SCONE model"),
    *blocks("docs/engram.md", "fgram for Engram models"),
]


def _tokenizer(words: str, out: str) -> None:
    """The synthetic corpus's word-level tokenizer with its end-of-text token moved from id
    0 to id VOCAB (and [UNK] to 0): a separator other than 0, as real tokenizers have."""
    spec = json.load(open(words))
    vocab = spec["model"]["vocab"]
    vocab["<|endoftext|>"], vocab["[UNK]"] = vocab["[UNK]"], vocab["<|endoftext|>"]
    for added in spec["added_tokens"]:
        if added["content"] == "<|endoftext|>":
            added["id"] = vocab["<|endoftext|>"]
    json.dump(spec, open(out, "w"))


def readme_commands() -> list[str]:
    """The README's commands on a fresh machine and after, one per item, its installs and
    new environments left out (the tests run in the environment they make)."""
    found = []
    for name in ("Two commands, on a fresh machine", "See what it made"):
        for block in blocks("README.md", name, lang="bash"):
            for line in block.replace("\\\n", " ").splitlines():
                for cmd in line.split("&&"):
                    cmd = " ".join(cmd.split())
                    if cmd and not cmd.startswith("python3 -m venv") and "pip install" not in cmd:
                        found.append(cmd)
    return found


def test_the_readmes_commands_run_as_written(tmp_path):
    """The newcomer's path: the main job on a generated corpus, its report, and the same
    corpus as token ids giving the same table."""
    import pyarrow.parquet as pq

    cmds = readme_commands()
    assert cmds[0].startswith(".venv/bin/fgram synth") and cmds[-1].startswith(
        ".venv/bin/fgram build"
    )
    assert any(c.startswith(".venv/bin/ruff check") for c in cmds)
    bin_dir = os.path.dirname(sys.executable)
    for cmd in cmds:
        if not cmd.startswith(".venv/bin/fgram "):
            continue  # the lint and the tests: what runs this one
        argv = [os.path.join(bin_dir, "fgram"), *cmd.split()[1:]]
        res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        if cmd.startswith(".venv/bin/fgram show"):
            assert "top 10:" in res.stdout and "f-grams: 100000" in res.stdout, res.stdout
    assert (tmp_path / "demo" / "report.html").exists()
    text, ids = (
        pq.read_table(tmp_path / "demo" / name / "fgrams").sort_by("fgram_id").to_pylist()
        for name in ("fgrams", "fgrams-ids")
    )
    assert len(text) > 1000 and text == ids


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """What the README's own-corpus commands make, run as written in a folder holding
    their inputs: data/ and heldout/ (JSON Lines in zstd) and tokenizer.json."""
    d = tmp_path_factory.mktemp("readme")
    fgram.synth(d / "data", tokens=200_000, vocab=VOCAB, format="text", files=2)
    fgram.synth(d / "heldout", tokens=20_000, vocab=VOCAB, format="text", seed=1, book_seed=0)
    _tokenizer(str(d / "data" / "tokenizer.json"), str(d / "tokenizer.json"))
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    res = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", COMMANDS],
        cwd=d,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "warning" not in res.stderr, res.stderr
    return d, res


def test_the_own_corpus_commands_run_as_written_and_say_what_they_chose(outputs):
    d, res = outputs
    shards = json.load(open(d / "shards" / "manifest.json"))
    assert shards["doc_sep"] == VOCAB and shards["dtype"] == "uint16"
    assert f"separator {VOCAB} '<|endoftext|>' after each document" in res.stdout
    table = json.load(open(d / "fgrams" / "manifest.json"))
    assert table["config"]["doc_sep"] == VOCAB and table["fgrams"] > 1000
    assert "fewer than -S 10M" in res.stdout  # a small corpus: every n-gram of count >= 5
    assert (d / "report.html").exists() and (d / "tags-olmo" / "_SUCCESS").exists()
    assert json.load(open(d / "fgrams" / "embeddings" / "embeddings.json"))["engine"] == "local"


ENGRAM = "fgram for Engram models"
(ENGRAM_COMMANDS,) = blocks("docs/engram.md", ENGRAM, lang="bash")


def test_the_engram_commands_run_as_written(outputs):
    """The canonical build, the audit (its size curve) and the report page with it, over
    what the own-corpus commands made."""
    d, _ = outputs
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", ENGRAM_COMMANDS], cwd=d, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert "warning" not in res.stderr, res.stderr
    assert json.load(open(d / "fgrams-canonical" / "manifest.json"))["canonical"]["size"] > 0
    assert "collided share" in res.stdout and "under 1%" in res.stdout
    page = (d / "engram.html").read_text()
    assert "Engram collision audit" in page
    if importlib.util.find_spec("matplotlib"):
        assert 'alt="collided share by table size"' in page


def _needs(code: str) -> None:
    for package in ("torch", "transformers"):
        imported = re.search(rf"^\s*(from|import) (fgram\.)?{package}\b", code, re.M)
        if imported and importlib.util.find_spec(package) is None:
            pytest.skip(f"the snippet needs {package} (an optional extra)")


@pytest.mark.parametrize("i", range(len(SNIPPETS)))
def test_a_readme_snippet_runs_as_written(outputs, i):
    code = SNIPPETS[i]
    _needs(code)
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=outputs[0], capture_output=True, text=True, timeout=300
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
    d = outputs[0]
    shards = sorted(str(p) for p in (d / "shards" / "shards").glob("*.bin"))
    tags = [str(d / "tags-olmo" / "tags" / os.path.basename(p)[: -len(".bin")]) for p in shards]
    ds = space["FgramTokens"](shards, tags, 256)
    tags = fgram.FgramTags.open(d / "tags")
    sizes = [len(t) for t in ds.tokens]  # windows within each token file
    starts = np.concatenate([[0], np.cumsum(sizes)])
    assert len(shards) > 1 and starts[-1] == len(tags)
    assert len(ds) == sum(n // 256 for n in sizes)
    for i in (0, 1, len(ds) - 1):
        item = ds[i]
        f, at = ds.index[i]
        tokens, ids, lens = tags._raw(int(starts[f]) + at, 256)  # as written: matches uncut
        assert np.array_equal(item["input_ids"].numpy(), tokens)
        assert np.array_equal(item["fgram_ids"].numpy(), ids)
        assert np.array_equal(item["match_len"].numpy(), lens)


def test_the_readme_is_a_guide_and_benchmarks_a_reference():
    """A newcomer reads the README in ten minutes; BENCHMARKS.md holds current figures."""
    lengths = {name: open(os.path.join(REPO, name)).read().count("\n") for name in LIMITS}
    assert {n: k for n, k in lengths.items() if k > LIMITS[n]} == {}


LIMITS = {"README.md": 200, "BENCHMARKS.md": 300}
