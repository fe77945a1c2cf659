"""Tokenizer backends (`fgram.pipeline.text.backends`): the fast one gives exactly
`tokenizers`' ids (hypothesis over unicode text, with and without special tokens), a
run proves it on hard cases and its own documents before the first task, and a backend
that differs by one id is caught: one warning line naming it and the document, and the
run's shards are `tokenizers`' own."""

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fgram
from fgram.pipeline.text import backends
from fgram.pipeline.text.backends import Backend, choose, hard_cases

pytest.importorskip("tokenizers", reason="the text extra")
fast = pytest.importorskip("fastokens", reason="the text extra installs fastokens")

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "then",
    "the",
    "dog",
    "ran",
    "off",
    "héllo",
    "wörld",
    "☃",
    "日本",
    "👩\u200d👧",
]


def _bpe(special_template: bool = False):
    """A byte-level BPE trained here, with <|endoftext|> and <|bos|> (and, with
    ``special_template``, a post-processor that puts <|bos|> first)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>", "<|bos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = np.random.default_rng(0)
    tok.train_from_iterator([" ".join(rng.choice(WORDS, 14)) for _ in range(400)], trainer)
    if special_template:
        bos = tok.token_to_id("<|bos|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|bos|> $A", special_tokens=[("<|bos|>", bos)]
        )
    return tok


BPE = _bpe()
BOS = _bpe(special_template=True)


def _ids(backend: Backend, tok_json: str, texts, special):
    return backend.encode(backend.load(tok_json), list(texts), special)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    texts=st.lists(
        st.one_of(
            st.text(max_size=60),
            st.lists(st.sampled_from([*WORDS, " ", "\n", "  ", "<|endoftext|>"])).map("".join),
        ),
        max_size=8,
    ),
    special=st.booleans(),
    template=st.booleans(),
)
def test_fastokens_gives_tokenizers_ids_on_any_text(texts, special, template):
    tok_json = (BOS if template else BPE).to_str()
    want = _ids(backends.TOKENIZERS, tok_json, texts, special)
    got = _ids(backends.FASTOKENS, tok_json, texts, special)
    assert np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])


def test_auto_proves_fastokens_and_falls_back_where_it_cannot_load(tmp_path, capsys):
    assert choose("auto", BPE.to_str(), [("doc", "the cat")], False) == "fastokens"
    assert any("<|endoftext|>" in c for c in hard_cases(BPE.to_str()))
    from fgram.pipeline.formats.synth import generate

    generate(str(tmp_path / "c"), 2000, vocab=50, fmt="text")  # a WordLevel tokenizer
    word_level = open(tmp_path / "c" / "tokenizer.json").read()
    assert choose("auto", word_level, [], False) == "tokenizers"
    assert capsys.readouterr().err == ""  # auto: not this tokenizer's backend, quietly
    assert choose("fastokens", word_level, [], False) == "tokenizers"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("fgram: warning: the fastokens backend cannot load this tokenizer")


def _differs(monkeypatch):
    """A backend named fastokens whose ids differ from tokenizers' by one, in documents
    holding 'dog'."""
    dog = BPE.encode("then the dog").ids[-1]  # " dog"

    def encode(tok, texts, special):
        lengths, ids = backends.FASTOKENS.encode(tok, texts, special)
        ids = ids.copy()
        ids[np.flatnonzero(ids == dog)[:1]] += 1
        return lengths, ids

    double = Backend("fastokens", "fastokens", backends.FASTOKENS.load, encode, ())
    monkeypatch.setitem(backends.BACKENDS, "fastokens", double)


def _text(tmp_path, docs):
    os.makedirs(tmp_path / "text", exist_ok=True)
    with open(tmp_path / "text" / "a.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    BPE.save(str(tmp_path / "tokenizer.json"))
    return str(tmp_path / "text"), str(tmp_path / "tokenizer.json")


def test_a_backend_that_differs_is_caught_and_the_run_uses_tokenizers(
    tmp_path, monkeypatch, capsys
):
    docs = ["the cat sat on a mat", "then the dog ran off", "héllo wörld"] * 20
    text, tok = _text(tmp_path, docs)
    run = dict(engine="local", format="bin")
    ref = fgram.tokenize([text], tmp_path / "ref", tok, tokenizer_backend="tokenizers", **run)
    assert ref["tokenizer"]["backend"] == "tokenizers"
    fast_run = fgram.tokenize([text], tmp_path / "fast", tok, **run)
    assert fast_run["tokenizer"]["backend"] == "fastokens"
    assert fast_run["tokenizer"]["backend_version"] == backends.FASTOKENS.version()
    capsys.readouterr()
    _differs(monkeypatch)
    got = fgram.tokenize([text], tmp_path / "got", tok, **run)
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert line == (
        f"fgram: warning: the fastokens backend's ids differ from tokenizers' on {text}/a.jsonl "
        "document 2 ('then the dog ran off'...); tokenizing with tokenizers"
    )
    assert got["tokenizer"]["backend"] == "tokenizers"
    for out in ("fast", "got"):
        for name in os.listdir(tmp_path / "ref" / "shards"):
            a = (tmp_path / "ref" / "shards" / name).read_bytes()
            assert (tmp_path / out / "shards" / name).read_bytes() == a, (out, name)


def test_a_build_from_text_and_its_coverage_use_the_proven_backend(tmp_path):
    docs = [" ".join(np.random.default_rng(i).choice(WORDS, 30)) for i in range(200)]
    text, tok = _text(tmp_path, docs)
    kw = dict(tokenizer=tok, engine="local", max_len=4, min_count=2)
    m = fgram.build(tmp_path / "t", [text], **kw)
    ref = fgram.build(tmp_path / "r", [text], tokenizer_backend="tokenizers", **kw)
    assert m["text"]["tokenizer"]["backend"] == "fastokens"
    assert ref["text"]["tokenizer"]["backend"] == "tokenizers"
    assert (
        fgram.show(tmp_path / "t", top=10**6)["top_fgrams"]
        == fgram.show(tmp_path / "r", top=10**6)["top_fgrams"]
    )
    fgram.index(tmp_path / "t")
    a = fgram.coverage(tmp_path / "t", [text], tokenizer=tok, engine="local")
    b = fgram.coverage(
        tmp_path / "t", [text], tokenizer=tok, engine="local", tokenizer_backend="tokenizers"
    )
    assert a == b and a["positions"] > 0


def test_an_unknown_or_missing_backend_is_one_line(monkeypatch):
    from fgram.pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown tokenizer backend 'fast'"):
        choose("fast", BPE.to_str(), [], False)
    missing = Backend("fastokens", "no_such_package_here", backends.FASTOKENS.load, None, ())
    monkeypatch.setitem(backends.BACKENDS, "fastokens", missing)
    with pytest.raises(ConfigError, match="the package no_such_package_here is not installed"):
        choose("fastokens", BPE.to_str(), [], False)


def test_lookup_text_and_report_take_the_backend(tmp_path, monkeypatch, capsys):
    """lookup --text encodes through the proven backend (a differing one is caught on the
    text itself and tokenizers' ids are used); report --heldout of text takes
    --tokenizer-backend as coverage does."""
    from click.testing import CliRunner

    from fgram.cli import cli

    docs = ["the cat sat on a mat", "then the dog ran off", "the cat ran off"] * 20
    text, tok = _text(tmp_path, docs)
    fgram.build(tmp_path / "t", [text], tokenizer=tok, engine="local", max_len=4, min_count=2)
    fgram.index(tmp_path / "t")
    look = ["lookup", str(tmp_path / "t"), "--text", "then the dog ran", "--tokenizer", tok]
    ref = CliRunner().invoke(cli, [*look, "--tokenizer-backend", "tokenizers"])
    fast = CliRunner().invoke(cli, [*look, "--tokenizer-backend", "fastokens"])
    assert ref.exit_code == fast.exit_code == 0 and fast.stdout == ref.stdout
    _differs(monkeypatch)
    caught = CliRunner().invoke(cli, [*look, "--tokenizer-backend", "fastokens"])
    assert caught.exit_code == 0 and caught.stdout == ref.stdout
    assert "ids differ from tokenizers'" in caught.stderr
    pages = []
    for backend in ("tokenizers", "auto"):
        out = tmp_path / f"{backend}.html"
        res = CliRunner().invoke(
            cli, ["report", str(tmp_path / "t"), "-o", str(out), "--heldout", text,
                  "--tokenizer", tok, "--engine", "local", "--tokenizer-backend", backend],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        pages.append(json.loads(out.with_suffix(".json").read_text())["coverage"])
    assert pages[0] == pages[1] and pages[0]
