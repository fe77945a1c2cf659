"""Tags in the trainers' own layouts (`fgram annotate --layout`): OLMo-core's raw memmaps
beside each token file, a Megatron IndexedDataset beside each input, Parquet that
Hugging Face `datasets` loads. Each holds exactly the tags of fgram's own layout (which
the oracle tests check), read back by the trainer's reader and by `FgramTags`."""

import glob
import os

import numpy as np
import pytest
from helpers import build, megatron, write_bin, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from samples_spec import write_mds

import fgram
from fgram.pipeline.errors import ConfigError

KW = dict(max_len=4, min_count=2, engine="local")
documents = st.lists(st.lists(st.integers(1, 5), max_size=14), min_size=1, max_size=12)


def _table(tmp, inputs, **read):
    build(None, inputs, tmp / "t", **KW, **read)
    fgram.index(tmp / "t")
    return tmp / "t"


def _both(tmp, table, inputs, layout, unit, **read):
    """annotate in fgram's layout and in ``layout``; both readers' windows at every offset
    are the same."""
    kw = dict(engine="local", unit_tokens=unit, **read)
    fgram.annotate(table, inputs, tmp / "own", **kw)
    m = fgram.annotate(table, inputs, tmp / layout, layout=layout, **kw)
    assert m["config"]["layout"] == layout and m["layout"]["name"] == layout
    checked = fgram.verify(tmp / layout, deep=True)
    assert checked["problems"] == [] and len(m["files"]) >= 1
    own, other = fgram.FgramTags.open(tmp / "own"), fgram.FgramTags.open(tmp / layout)
    assert len(own) == len(other)
    for length in {1, 3, len(own)}:
        offsets = np.arange(len(own) - length + 1)
        for a, b in zip(own.windows(offsets, length), other.windows(offsets, length), strict=True):
            assert np.array_equal(a, b)
    return tmp / "own" / "tags", tmp / layout / "tags"


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=documents, unit=st.integers(2, 30), dtype=st.sampled_from(["uint16", "uint32"]))
def test_olmo_layout_is_raw_memmaps_of_the_token_files_length(tmp_path_factory, docs, unit, dtype):
    """``<stem>.fgid.bin`` (int32) and ``<stem>.mlen.bin`` (uint8), no header, one value per
    token of the file (a separator: -1 and 0), equal to fgram's .npy tags."""
    tmp = tmp_path_factory.mktemp("olmo")
    (tmp / "in").mkdir()
    path = write_bin(str(tmp / "in" / "part-0-00000.npy"), docs, 0, np.dtype(dtype))
    if not any(docs):
        return
    table = _table(tmp, [path], doc_sep=0, dtype=dtype)
    own, olmo = _both(tmp, table, [path], "olmo", unit, doc_sep=0, dtype=dtype)
    tokens = np.memmap(path, dtype=dtype, mode="r")
    ids = np.memmap(olmo / "part-0-00000.fgid.bin", dtype=np.int32, mode="r")
    lens = np.memmap(olmo / "part-0-00000.mlen.bin", dtype=np.uint8, mode="r")
    assert len(ids) == len(lens) == len(tokens)
    assert np.array_equal(ids, np.load(own / "part-0-00000.npy.fgid.npy"))
    assert np.array_equal(lens, np.load(own / "part-0-00000.npy.mlen.npy"))
    assert (lens[tokens == 0] == 0).all() and (ids[tokens == 0] == -1).all()
    assert sorted(os.listdir(olmo)) == ["part-0-00000.fgid.bin", "part-0-00000.mlen.bin"]


def _read_idx(prefix):
    """(dtype code, sequence lengths, pointers, document indices) of an ``.idx``."""
    import struct

    with open(f"{prefix}.idx", "rb") as f:
        data = f.read()
    _, _, code, s, d = struct.unpack("<9sQBQQ", data[:34])
    lengths = np.frombuffer(data, np.int32, s, 34)
    pointers = np.frombuffer(data, np.int64, s, 34 + 4 * s)
    return code, lengths, pointers, np.frombuffer(data, np.int64, d, 34 + 12 * s)


sequences = st.lists(st.lists(st.integers(0, 5), max_size=10), max_size=3)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=st.lists(sequences, min_size=1, max_size=10), unit=st.integers(2, 30))
def test_megatron_layout_is_an_indexed_dataset_beside_each_input(tmp_path_factory, docs, unit):
    """``<prefix>.fgid.bin/.idx`` (int32) and ``<prefix>.mlen.bin/.idx`` (uint8): the input's
    sequence lengths and document indices, pointers in the tags' width; read back by
    fgram's own IndexedDataset reader as the input is."""
    if not any(t for d in docs for s in d for t in s):
        return
    tmp = tmp_path_factory.mktemp("mg")
    (tmp / "in").mkdir()
    prefix = tmp / "in" / "corpus_text_document"
    megatron(prefix, docs)
    table = _table(tmp, [tmp / "in"])
    own, tags = _both(tmp, table, [tmp / "in"], "megatron", unit)
    _, lengths, pointers, documents = _read_idx(prefix)
    for what, dtype, code in (("fgid", np.int32, 4), ("mlen", np.uint8, 1)):
        got = _read_idx(tags / f"corpus_text_document.{what}")
        assert got[0] == code and np.array_equal(got[1], lengths)
        assert np.array_equal(got[2], pointers // 2 * np.dtype(dtype).itemsize)
        assert np.array_equal(got[3], documents)
        values = np.fromfile(tags / f"corpus_text_document.{what}.bin", dtype)
        assert np.array_equal(values, np.load(own / f"corpus_text_document.bin.{what}.npy"))
    from fgram.pipeline.formats.inputs import plan_shards
    from fgram.pipeline.formats.reading import ReadOptions
    from fgram.pipeline.formats.registry import format_of

    (shard,) = plan_shards([str(tags / "corpus_text_document.fgid")], ReadOptions())
    (source,) = plan_shards([str(prefix)], ReadOptions())
    assert shard.format == "megatron" and shard.dtype == "<i4"
    assert shard.n_items == source.n_items
    fmt = format_of(shard)
    n = source.n_items
    assert np.array_equal(fmt.doc_starts(shard, 0, n, None), fmt.doc_starts(source, 0, n, None))


def test_megatron_cores_indexed_dataset_reads_the_megatron_layout(tmp_path):
    """Megatron-core's own IndexedDataset (it needs torch: skipped without) reads the tags'
    sequences and documents as it reads the tokens'."""
    pytest.importorskip("torch", reason="megatron-core needs torch (an optional extra)")
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    (tmp_path / "in").mkdir()
    docs = [[[1, 2, 3], [4, 1, 2]], [[3, 4]], [], [[1, 2, 3, 4, 1, 2]], [[2, 3, 4, 1]]]
    megatron(tmp_path / "in" / "c", docs)
    table = _table(tmp_path, [tmp_path / "in"])
    own, tags = _both(tmp_path, table, [tmp_path / "in"], "megatron", 5)
    tokens = indexed.IndexedDataset(str(tmp_path / "in" / "c"))
    ids = indexed.IndexedDataset(str(tags / "c.fgid"))
    lens = indexed.IndexedDataset(str(tags / "c.mlen"))
    want_ids, want_lens = np.load(own / "c.bin.fgid.npy"), np.load(own / "c.bin.mlen.npy")
    assert len(ids) == len(lens) == len(tokens) == 5
    assert np.array_equal(ids.document_indices, tokens.document_indices)
    at = 0
    for i in range(len(tokens)):
        n = len(tokens[i])
        assert ids[i].dtype == np.int32 and np.array_equal(ids[i], want_ids[at : at + n])
        assert np.array_equal(lens[i], want_lens[at : at + n])
        at += n
    assert (want_lens > 1).any()


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(docs=documents, rows=st.integers(1, 4), unit=st.integers(2, 30))
def test_hf_layout_loads_with_datasets_aligned_with_input_ids(tmp_path_factory, docs, rows, unit):
    """Parquet with input_ids, fgram_ids and match_len lists per row (the input's other
    columns kept), loaded by `datasets.load_dataset("parquet", ...)`."""
    datasets = pytest.importorskip("datasets", reason="datasets is in the test extra")
    if not any(docs):
        return
    tmp = tmp_path_factory.mktemp("hf")
    path = write_parquet(str(tmp / "train.parquet"), docs, rows_per_group=rows)
    table = _table(tmp, [path])
    own, tags = _both(tmp, table, [path], "hf", unit)
    files = sorted(glob.glob(str(tags / "*.parquet")))
    got = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=tmp / "c")
    assert got.column_names == ["doc_id", "input_ids", "fgram_ids", "match_len"]
    assert got["input_ids"] == docs and got["doc_id"] == list(range(len(docs)))
    tags_of = fgram.FgramTags.open(tmp / "own")  # as written: a row's matches uncut
    ids = [i for u in range(len(tags_of.units)) for i in tags_of.unit(u)[1].tolist()]
    assert [i for row in got["fgram_ids"] for i in row] == ids
    assert [len(r) for r in got["fgram_ids"]] == [len(d) for d in docs]


def test_hf_layout_of_mds_samples_and_its_name_clash(tmp_path):
    """MDS samples as rows (their tokens as input_ids, the sample's number kept); a
    tokens column beside an input_ids column is refused with one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples = [{"tokens": np.array(d, np.int32)} for d in ([1, 2, 3, 1, 2], [3, 1, 2, 3], [2])]
    write_mds(tmp_path / "mds", samples, {"tokens": "ndarray:int32"}, [2, 1])
    table = _table(tmp_path, [tmp_path / "mds"], doc_sep=None, samples_are_documents=True)
    fgram.annotate(table, [tmp_path / "mds"], tmp_path / "hf", layout="hf", engine="local")
    got = pa.concat_tables(
        pq.read_table(f) for f in sorted(glob.glob(str(tmp_path / "hf" / "tags" / "*.parquet")))
    )
    assert got.column("input_ids").to_pylist() == [s["tokens"].tolist() for s in samples]
    assert got.column("sample").to_pylist() == [0, 1, 0]
    both = pa.table({"tokens": [[1, 2, 1, 2]], "input_ids": [[0]]})
    pq.write_table(both, tmp_path / "both.parquet")
    with pytest.raises(Exception, match="both.parquet: a column input_ids besides"):
        fgram.annotate(
            table, [tmp_path / "both.parquet"], tmp_path / "x", layout="hf", engine="local"
        )
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "layout, kind, allowed",
    [
        ("megatron", "bin", "fgram, olmo"),
        ("hf", "bin", "fgram, olmo"),
        ("olmo", "parquet", "fgram, hf"),
        ("megatron", "parquet", "fgram, hf"),
    ],
)
def test_a_layout_the_inputs_format_has_not_is_one_line(tmp_path, layout, kind, allowed):
    docs = [[1, 2, 3, 1, 2, 3], [2, 3, 1, 2]]
    path = (
        write_bin(str(tmp_path / "a.bin"), docs, 0)
        if kind == "bin"
        else write_parquet(str(tmp_path / "a.parquet"), docs)
    )
    read = {"doc_sep": 0} if kind == "bin" else {}
    table = _table(tmp_path, [path], **read)
    with pytest.raises(ConfigError) as err:
        fgram.annotate(table, [path], tmp_path / "x", layout=layout, engine="local", **read)
    assert str(err.value) == (
        f"{path}: --layout {layout} is not one of "
        f"{'flat' if kind == 'bin' else 'parquet'} inputs' ({allowed})"
    )
    assert not (tmp_path / "x").exists()


def test_each_layout_says_how_its_files_are_named():
    from fgram.pipeline.formats import registry
    from fgram.pipeline.formats.layouts import FGRAM, LAYOUTS

    assert LAYOUTS["fgram"].sidecar("part-0.bin", "fgid") == "part-0.bin.fgid.npy"
    assert LAYOUTS["olmo"].sidecar("part-0.bin", "mlen") == "part-0.mlen.bin"
    assert LAYOUTS["megatron"].sidecar("corpus_text_document.bin", "fgid") == (
        "corpus_text_document.fgid.bin"
    )
    assert LAYOUTS["olmo"].tag_name("a.npy") == LAYOUTS["olmo"].tag_name("a.bin") == "a"
    assert LAYOUTS["fgram"].tag_name("a.npy") != LAYOUTS["fgram"].tag_name("a.bin")
    assert [n for n, t in LAYOUTS.items() if t.indexed] == ["megatron"]
    assert [n for n, t in LAYOUTS.items() if t.tokens_beside] == ["hf"]
    for fmt in registry.FORMATS:  # every format writes fgram's own, and only known layouts
        assert FGRAM in fmt.layouts and set(fmt.layouts) <= set(LAYOUTS.values())
