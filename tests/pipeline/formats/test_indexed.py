"""Token files with their documents in an index beside them: Megatron / NeMo indexed
datasets (``PREFIX.bin`` + ``PREFIX.idx``) and datatrove's ``.ds`` + ``.ds.index``.
Written by datatrove's own writers and by writers of the spec below; every table equals
the oracle and the Parquet build of the same documents, whatever the units."""

import os
import re
import struct

import numpy as np
import pytest
from helpers import build, like_parquet, manifest, megatron, result, tags_read, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import select

import fgram
from fgram.pipeline.errors import InputError

KW = dict(max_len=4, min_count=2, engine="local")


def datatrove_spec(path, docs, dtype=np.uint16, metadata=True):
    """A datatrove ``.ds`` file: tokens, ``.ds.index`` (uint64 document ends) and its
    ``.ds.metadata`` (tokenizer|token size, token count)."""
    flat = np.asarray([t for d in docs for t in d], dtype)
    flat.tofile(path)
    np.cumsum([len(d) for d in docs], dtype=np.uint64).astype("<u8").tofile(f"{path}.index")
    if metadata:
        with open(f"{path}.metadata", "w") as f:
            f.write(f"gpt2|{np.dtype(dtype).itemsize}\n{len(flat)}")
    return path


sequences = st.lists(st.lists(st.integers(0, 5), max_size=12), max_size=4)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(sequences, min_size=1, max_size=14), unit=st.integers(2, 40))
def test_a_megatron_dataset_builds_and_tags_like_parquet(tmp_path_factory, docs, unit):
    """Sequences of one document are one stream (no n-gram lost between them); empty
    documents and sequences, documents across units."""
    flat = [[t for s in d for t in s] for d in docs]
    if not any(flat):
        return  # an input without tokens is refused, as for every format
    tmp = tmp_path_factory.mktemp("mg")
    (tmp / "in").mkdir()
    megatron(tmp / "in" / "corpus_text_document", docs)
    like_parquet(tmp, [tmp / "in"], flat, unit)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    docs=st.lists(st.lists(st.integers(0, 5), max_size=15), min_size=1, max_size=12),
    unit=st.integers(2, 40),
)
def test_a_datatrove_file_builds_and_tags_like_parquet(tmp_path_factory, docs, unit):
    if not any(docs):
        return
    tmp = tmp_path_factory.mktemp("ds")
    path = datatrove_spec(str(tmp / "000_tokens.ds"), docs, np.uint32)
    like_parquet(tmp, [path], docs, unit)


def _docs(seed, n=80):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, 40, int(rng.integers(0, 30)))] for _ in range(n)]


@pytest.mark.parametrize("token_size", [2, 4])
def test_datatrove_writers_files_are_read_as_written(tmp_path, token_size):
    """Files written by datatrove's own writers (its Megatron one and its .ds one), in
    both widths, with no --dtype: the index and the metadata say it."""
    pytest.importorskip("datatrove", reason="datatrove is in the test extra")
    from datatrove.pipeline.tokens.megatron_tokenizer import MegatronTokenizedFile
    from datatrove.pipeline.tokens.tokenizer import TokenizedFile

    docs = _docs(token_size)
    mg = MegatronTokenizedFile(str(tmp_path / "mg"), "part_00000", token_size=token_size)
    ds = TokenizedFile(
        str(tmp_path / "ds"), "000_part.ds", save_final_metadata=True, token_size=token_size
    )
    for doc in docs:
        mg.write(doc)
        ds.write(doc, None)
    mg.close()
    ds.close()
    want = select(docs, 4, 2, None)
    for folder in ("mg", "ds"):
        build(None, [tmp_path / folder], tmp_path / f"t-{folder}", unit_tokens=97, **KW)
        assert result(tmp_path / f"t-{folder}") == want
        fmt = manifest(tmp_path / f"t-{folder}")["inputs"][0]
        assert fmt["format"] == {"mg": "megatron", "ds": "datatrove"}[folder]
        widths = {2: {"mg": "<u2", "ds": "<u2"}, 4: {"mg": "<i4", "ds": "<u4"}}
        assert fmt["dtype"] == widths[token_size][folder]


def test_megatron_cores_own_builder_is_read_as_written(tmp_path):
    """The IndexedDatasetBuilder of megatron-core (it needs torch: skipped without)."""
    pytest.importorskip("torch", reason="megatron-core needs torch (an optional extra)")
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    import torch

    docs = [[[1, 2, 3], [4, 1, 2]], [[3, 4]], [], [[1, 2, 3, 4, 1, 2]]]
    b = indexed.IndexedDatasetBuilder(str(tmp_path / "c.bin"), dtype=np.int32)
    for doc in docs:
        for seq in doc:
            b.add_item(torch.tensor(seq, dtype=torch.int32))
        b.end_document()
    b.finalize(str(tmp_path / "c.idx"))
    build(None, [tmp_path / "c"], tmp_path / "t", **KW)
    assert result(tmp_path / "t") == select([sum(d, []) for d in docs], 4, 2, None)


def test_an_indexed_dataset_is_named_by_prefix_bin_idx_or_folder(tmp_path):
    docs = [[[1, 2, 3]], [[1, 2], [3, 4]], [[7, 1, 2, 3]]]
    megatron(tmp_path / "c_text_document", docs)
    want = select([sum(d, []) for d in docs], 4, 2, None)
    for i, name in enumerate(["c_text_document", "c_text_document.idx", "c_text_document.bin"]):
        build(None, [tmp_path / name], tmp_path / f"t{i}", **KW)
        assert result(tmp_path / f"t{i}") == want
        assert [r["format"] for r in manifest(tmp_path / f"t{i}")["inputs"]] == ["megatron"]
    both = [tmp_path / "c_text_document.bin", tmp_path / "c_text_document.idx"]
    build(None, both, tmp_path / "t3", **KW)  # named twice: read once
    assert result(tmp_path / "t3") == want


def _truncate(path, by):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - by)


def _set(path, offset, fmt, value):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack(fmt, value))


BAD = {
    "idx truncated": (lambda p: _truncate(f"{p}.idx", 8), "idx", "makes"),
    "bin truncated": (lambda p: _truncate(f"{p}.bin", 2), "bin", "sequences end at byte"),
    "bin grown": (lambda p: open(f"{p}.bin", "ab").write(b"\0\0"), "bin", "the file holds 20"),
    "dtype code": (lambda p: _set(f"{p}.idx", 17, "<B", 9), "idx", "unknown dtype code 9"),
    "float dtype": (lambda p: _set(f"{p}.idx", 17, "<B", 7), "idx", "float32 (dtype code 7)"),
    "version": (lambda p: _set(f"{p}.idx", 9, "<Q", 2), "idx", "index version 2; known: 1"),
    "magic": (lambda p: _set(f"{p}.idx", 0, "<B", 0), "idx", "no MMIDIDX magic"),
    "document index": (lambda p: _set(f"{p}.idx", 106, "<q", 3), "idx", "indices run from 0 to 3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_broken_indexed_dataset_is_one_line_naming_the_file(tmp_path, case):
    spoil, which, says = BAD[case]
    prefix = tmp_path / "c"
    megatron(prefix, [[[1, 2, 3], [4, 5]], [[6, 7, 8]], [[9]]])  # 4 sequences, 9 tokens
    spoil(prefix)
    with pytest.raises(InputError, match=re.escape(f"{prefix}.{which}: ") + ".*" + re.escape(says)):
        build(None, [tmp_path], tmp_path / "t", **KW)
    assert not (tmp_path / "t").exists()


def test_a_missing_partner_file_is_named(tmp_path):
    megatron(tmp_path / "a", [[[1, 2, 3]]])
    os.remove(tmp_path / "a.bin")
    with pytest.raises(InputError, match=re.escape(f"{tmp_path}/a.idx: read beside a.bin")):
        build(None, [tmp_path], tmp_path / "t", **KW)
    says = f"{tmp_path}/a: no such file; as a prefix, a.bin is missing"
    with pytest.raises(InputError, match=re.escape(says)):
        build(None, [tmp_path / "a"], tmp_path / "t", **KW)
    ds = datatrove_spec(str(tmp_path / "b.ds"), [[1, 2, 3]])
    os.remove(f"{ds}.index")
    with pytest.raises(InputError, match=re.escape(f"{ds}: its index {ds}.index is missing")):
        build(None, [ds], tmp_path / "t", **KW)
    ds = datatrove_spec(str(tmp_path / "c.ds"), [[1, 2, 3], [4, 5]])
    np.asarray([3, 6], "<u8").tofile(f"{ds}.index")  # one token more than the file holds
    with pytest.raises(InputError, match=re.escape(f"{ds}: its index {ds}.index says its docu")):
        build(None, [ds], tmp_path / "t", **KW)
    assert not (tmp_path / "t").exists()


def test_indexed_datasets_on_an_object_store_as_locally(tmp_path, s3):
    """Build, annotate, coverage and refresh take indexed datasets in a bucket (a folder
    and a prefix), with the results of the same documents as local Parquet."""
    from fgram.pipeline.io.storage import locate

    bucket = s3.bucket()
    docs = _docs(7, 60)
    megatron(tmp_path / "m", [[d[: len(d) // 2], d[len(d) // 2 :]] for d in docs[:30]])
    datatrove_spec(str(tmp_path / "n.ds"), docs[30:])
    for name in ("m.bin", "m.idx", "n.ds", "n.ds.index", "n.ds.metadata"):
        locate(f"s3://{bucket}/in/{name}").upload(str(tmp_path / name))
    pq = write_parquet(str(tmp_path / "same.parquet"), docs)
    inputs = [f"s3://{bucket}/in"]
    build(None, inputs, tmp_path / "t", unit_tokens=101, **KW)
    build(None, [pq], tmp_path / "p", unit_tokens=101, **KW)
    assert result(tmp_path / "t") == result(tmp_path / "p") == select(docs, 4, 2, None)
    build(None, [f"s3://{bucket}/in/m"], tmp_path / "t2", unit_tokens=101, **KW)  # a prefix
    assert result(tmp_path / "t2") == select(docs[:30], 4, 2, None)
    fgram.index(tmp_path / "t")
    fgram.annotate(tmp_path / "t", inputs, f"s3://{bucket}/tags", engine="local", unit_tokens=50)
    fgram.annotate(tmp_path / "t", [pq], tmp_path / "ptags", engine="local")
    n = sum(map(len, docs))
    assert tags_read(f"s3://{bucket}/tags", n) == tags_read(tmp_path / "ptags", n)
    remote, local = (
        fgram.FgramTags.open(f"s3://{bucket}/tags"),
        fgram.FgramTags.open(tmp_path / "ptags"),
    )
    offsets = [0, 7, n // 2, n - 40]  # flat tags on the store: their tokens read by range
    for got, want in zip(remote.windows(offsets, 40), local.windows(offsets, 40), strict=True):
        assert got.tolist() == want.tolist()
    cov = fgram.coverage(tmp_path / "t", inputs, engine="local", unit_tokens=50)
    assert cov == fgram.coverage(tmp_path / "t", [pq], engine="local")
    r = tmp_path / "r"
    fgram.refresh(r, inputs, unit_tokens=101, **KW)
    more = _docs(8, 20)
    datatrove_spec(str(tmp_path / "o.ds"), more)
    for name in ("o.ds", "o.ds.index", "o.ds.metadata"):
        locate(f"s3://{bucket}/in/{name}").upload(str(tmp_path / name))
    m = fgram.refresh(r, inputs, unit_tokens=101, **KW)
    assert m["built"] and result(r / "current") == select(docs + more, 4, 2, None)
    assert m["manifest"]["refresh"]["kept_shards"] == 2  # counted before: not again
