"""Arrow IPC files: Hugging Face ``datasets`` saved with ``save_to_disk`` (written by
``datasets`` itself) and streams and files written by pyarrow's IPC writers; the table
equals the oracle and the Parquet build of the same documents, the tags the Parquet
input's, whatever the batches and units."""

import os
import re

import numpy as np
import pyarrow as pa
import pytest
from helpers import build, like_parquet, manifest, result, tags_read
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import select

import fgram
from fgram.pipeline.errors import InputError

KW = dict(max_len=4, min_count=2, engine="local")


def write_arrow(path, docs, batch=3, column="input_ids", file_format=False, typ=None):
    """Documents as an Arrow IPC stream (or file), ``batch`` rows a record batch, with
    another column beside the tokens."""
    table = pa.table(
        {
            "text": [f"doc {i}" for i in range(len(docs))],
            column: pa.array(docs, pa.list_(typ or pa.int32())),
        }
    )
    new = pa.ipc.new_file if file_format else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, new(sink, table.schema) as w:
        for b in table.to_batches(max_chunksize=max(batch, 1)):
            w.write_batch(b)
    return str(path)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    docs=st.lists(st.lists(st.integers(0, 5), max_size=15), min_size=1, max_size=14),
    batch=st.integers(1, 6),
    unit=st.integers(1, 40),
    file_format=st.booleans(),
)
def test_an_arrow_stream_builds_and_tags_like_parquet(
    tmp_path_factory, docs, batch, unit, file_format
):
    if not any(docs):
        return  # an input without tokens is refused, as for every format
    tmp = tmp_path_factory.mktemp("arrow")
    path = write_arrow(tmp / "data-00000-of-00001.arrow", docs, batch, file_format=file_format)
    like_parquet(tmp, [path], docs, unit)


def _docs(seed, n):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, 30, int(rng.integers(0, 25)))] for _ in range(n)]


def test_a_datasets_save_to_disk_folder_is_read_as_saved(tmp_path):
    """A Dataset in shards and a DatasetDict (a folder per split, files of the same
    names): tokens from ``input_ids``, batches as ``datasets`` wrote them, tags per split."""
    datasets = pytest.importorskip("datasets", reason="datasets is in the test extra")
    docs = _docs(1, 2500)
    ds = datasets.Dataset.from_dict(
        {"input_ids": docs, "attention_mask": [[1] * len(d) for d in docs]}
    )
    ds.save_to_disk(str(tmp_path / "one"), num_shards=3)
    splits = datasets.DatasetDict(
        {"train": ds.select(range(2000)), "validation": ds.select(range(2000, 2500))}
    )
    splits.save_to_disk(str(tmp_path / "dict"))
    build(None, [tmp_path / "one"], tmp_path / "t1", unit_tokens=3000, **KW)
    assert result(tmp_path / "t1") == select(docs, 4, 2, None)
    assert [r["format"] for r in manifest(tmp_path / "t1")["inputs"]] == ["arrow"] * 3
    build(None, [tmp_path / "dict"], tmp_path / "t2", unit_tokens=3000, **KW)
    in_order = docs[:2000] + docs[2000:]  # train, then validation: by folder name
    assert result(tmp_path / "t2") == select(in_order, 4, 2, None)
    fgram.index(tmp_path / "t2")
    m = fgram.annotate(tmp_path / "t2", [tmp_path / "dict"], tmp_path / "tags", engine="local")
    names = sorted(os.listdir(tmp_path / "tags" / "tags"))
    assert names[0].startswith("train-data-00000-of-00001.") and names[-1].startswith("validation-")
    assert m["layout"]["arrow"].startswith("<folder>-<stem>")
    n = sum(map(len, docs))
    assert tags_read(tmp_path / "tags", n)[0] == [t for d in in_order for t in d]


def _cut(path, by):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - by)


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda p: _cut(p, 40), "truncated Arrow stream"),
        (lambda p: open(p, "wb").write(b"\x00" * 64), "not an Arrow IPC stream"),
        (
            lambda p: write_arrow(p, [[1, 2]], column="ids"),
            "no column 'tokens' (columns: text, ids)",
        ),
        (lambda p: write_arrow(p, [[1.5]], typ=pa.float32()), "expected a list of integers"),
        (lambda p: write_arrow(p, [[1, -2]]), "negative token id -2"),
    ],
)
def test_a_broken_arrow_file_is_one_line_naming_it(tmp_path, spoil, says):
    path = write_arrow(tmp_path / "d.arrow", _docs(2, 30))
    spoil(path)
    with pytest.raises(InputError, match=re.escape(f"{path}: ") + ".*" + re.escape(says)):
        build(None, [path], tmp_path / "t", **KW)
    assert not (tmp_path / "t").exists()


def test_arrow_files_on_an_object_store_build_as_locally(tmp_path, s3):
    from fgram.pipeline.io.storage import locate

    bucket = s3.bucket()
    docs = _docs(3, 200)
    write_arrow(tmp_path / "data-00000-of-00002.arrow", docs[:120], batch=7)
    write_arrow(tmp_path / "data-00001-of-00002.arrow", docs[120:], batch=50, file_format=True)
    for name in ("data-00000-of-00002.arrow", "data-00001-of-00002.arrow"):
        locate(f"s3://{bucket}/hf/{name}").upload(str(tmp_path / name))
    build(None, [f"s3://{bucket}/hf"], tmp_path / "t", unit_tokens=200, **KW)
    assert result(tmp_path / "t") == select(docs, 4, 2, None)
    fgram.index(tmp_path / "t")
    fgram.annotate(tmp_path / "t", [f"s3://{bucket}/hf"], f"s3://{bucket}/tags", engine="local")
    n = sum(map(len, docs))
    assert tags_read(f"s3://{bucket}/tags", n)[0] == [t for d in docs for t in d]
