"""Tokens meet a table only under the tokenizer the table was built with: annotate,
coverage (of shards and of text), lookup --text and refresh refuse another one in one
line naming both, before any work; the same tokenizer passes."""

import pytest
from click.testing import CliRunner

import fgram
from fgram.cli import cli
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.formats.synth import generate

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("meet")
    generate(str(d / "a"), 20_000, vocab=300, fmt="text", files=1)  # tokenizer A
    generate(str(d / "b"), 20_000, vocab=200, fmt="text", files=1)  # another one, B
    run = {"engine": "local"}
    for name in ("a", "b"):
        fgram.tokenize([d / "a"], d / f"tok-{name}", d / name / "tokenizer.json", **run)
    fgram.build(d / "t", [d / "tok-a"], min_count=2, max_len=3, **run)
    fgram.index(d / "t")
    fgram.refresh(d / "r", [d / "tok-a"], min_count=2, max_len=3, **run)
    return d


def test_shards_of_another_tokenizer_are_refused(made):
    d = made
    with pytest.raises(ConfigError, match="tokenized with b .*built with a"):
        fgram.coverage(d / "t", [d / "tok-b"], engine="local")
    with pytest.raises(ConfigError, match="tokenized with b"):
        fgram.annotate(d / "t", [d / "tok-b"], d / "tags", engine="local")
    assert not (d / "tags").exists()
    same = fgram.coverage(d / "t", [d / "tok-a"], engine="local")
    assert same["mean_match_length"] > 1


def test_text_with_another_tokenizer_is_refused_before_tokenizing(made):
    d = made
    with pytest.raises(ConfigError, match="built with a"):
        fgram.coverage(d / "t", [d / "a"], tokenizer=str(d / "b" / "tokenizer.json"))
    res = CliRunner().invoke(
        cli, ["lookup", str(d / "t"), "--text", "x", "--tokenizer", str(d / "b")]
    )
    assert res.exit_code == 2 and "its token ids mean other words" in res.output


def test_a_refresh_with_another_tokenizer_is_refused(made):
    d = made
    with pytest.raises(ConfigError, match="current version .* was built with a"):
        fgram.refresh(d / "r", [d / "tok-b"], min_count=2, max_len=3, engine="local")
    again = fgram.refresh(d / "r", [d / "tok-a"], min_count=2, max_len=3, engine="local")
    assert again["built"] is False  # the same inputs, the same tokenizer: up to date
