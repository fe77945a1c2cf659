"""The shard formats `fgram tokenize` writes, each a `TokenWriter`."""

import dataclasses

import numpy as np
import pyarrow.parquet as pq
import pytest

from fgram.pipeline.config.commands import TokenizeConfig
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.io.publish import here
from fgram.pipeline.text.token_shards import WRITERS, ShardWriter


def test_the_command_line_offers_each_writer_and_no_other():
    field = next(f for f in dataclasses.fields(TokenizeConfig) if f.name == "format")
    assert set(field.metadata["option"].choices) == set(WRITERS)
    assert field.default in WRITERS


def test_each_writer_says_its_token_type_or_what_does_not_fit():
    bin_, parquet = WRITERS["bin"], WRITERS["parquet"]
    assert bin_.token_type(50257, 50256, None, None, "tok.json") == ("uint16", 50256)
    assert bin_.token_type(100277, 100257, None, 7, "tok.json") == ("uint32", 7)
    assert parquet.token_type(100277, None, None, None, "tok.json") == ("int32", None)
    with pytest.raises(ConfigError, match=r"tok.json: its 100277 token ids do not fit uint16"):
        bin_.token_type(100277, 0, "uint16", None, "tok.json")
    with pytest.raises(ConfigError, match="names no end-of-document token"):
        bin_.token_type(1000, None, None, None, "tok.json")
    with pytest.raises(ConfigError, match="--doc-sep 70000 does not fit uint16"):
        bin_.token_type(1000, 1, None, 70000, "tok.json")


def test_shards_are_cut_at_documents_in_each_format(tmp_path):
    """Three documents of 3, 4 and 2 tokens, shards of about 4 tokens: a shard ends
    after the document that fills it, in both formats the same documents."""
    lengths = np.array([3, 4, 2])
    flat = np.arange(1, 10)
    for name, writer in WRITERS.items():
        (tmp_path / name / "shards").mkdir(parents=True)  # made by the job
        shards = ShardWriter(here(str(tmp_path / name)), 2, "in.jsonl", writer, 4, "uint16", 0)
        shards.add(np.arange(3), np.arange(3), lengths, flat, None)
        shards.flush()
        assert shards.names == [
            f"shards/part-00002-000.{writer.extension}",
            f"shards/part-00002-001.{writer.extension}",
        ]
        assert [s["tokens"] for s in shards.sizes] == [7, 2]
        first = str(tmp_path / name / shards.names[0])
        if name == "bin":
            assert np.fromfile(first, "<u2").tolist() == [1, 2, 3, 0, 4, 5, 6, 7, 0]
        else:
            t = pq.read_table(first)
            assert t.column_names == writer.columns(None)
            assert t.column("tokens").to_pylist() == [[1, 2, 3], [4, 5, 6, 7]]
