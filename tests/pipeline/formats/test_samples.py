"""Sample files listed by an ``index.json``: MosaicML MDS and LitData datasets, written
by the ecosystem's own writers (where they install) and by writers of the spec
(`samples_spec`). Samples as windows of one stream (documents at --doc-sep, across
files) equal a flat file of the same stream; samples as documents equal Parquet."""

import json
import os
import re

import numpy as np
import pytest
from helpers import build, like_parquet, manifest, result, tags_read
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import select
from samples_spec import windows, write_litdata, write_mds

import fgram
from fgram.pipeline.errors import InputError

KW = dict(max_len=4, min_count=2, engine="local")
SEP = 0
ENCODINGS = ["ndarray:int32", "ndarray", "ndarray:uint16", "bytes"]


def like_flat(tmp, inputs, docs, unit, **read) -> None:
    """``inputs`` read as one stream with SEP after each document: the table, totals and
    tags of a flat file of that stream."""
    kw = dict(KW, unit_tokens=unit, doc_sep=SEP)
    build(None, inputs, tmp / "t", **kw, **read)
    flat = str(tmp / "same.bin")
    np.asarray([t for d in docs for t in [*d, SEP]], np.uint16).tofile(flat)
    build(None, [flat], tmp / "f", **kw)
    want = select([d for d in docs if d], 4, 2, None)
    assert result(tmp / "t") == result(tmp / "f") == want
    assert manifest(tmp / "t")["totals"] == manifest(tmp / "f")["totals"]
    if not want:
        return
    fgram.index(tmp / "t")
    opts = dict(engine="local", unit_tokens=unit, doc_sep=SEP)
    fgram.annotate(tmp / "t", inputs, tmp / "tags", **opts, **read)
    fgram.annotate(tmp / "t", [flat], tmp / "ftags", **opts)
    n = sum(len(d) + 1 for d in docs)
    got = tags_read(tmp / "tags", n)
    assert got == tags_read(tmp / "ftags", n)
    assert max(got[2]) > 1


def split(counts, n):
    """``n`` items in files of ``counts`` items each, the last file the rest."""
    out = []
    for c in [*counts, n]:
        out.append(min(c, n - sum(out)))
    return [c for c in out if c > 0]


def _cut(draw_cuts, n):
    return sorted({c for c in draw_cuts if 0 < c < n})


@settings(max_examples=14, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    docs=st.lists(st.lists(st.integers(1, 5), max_size=12), min_size=1, max_size=14),
    cuts=st.lists(st.integers(1, 200), max_size=30),
    files=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    encoding=st.sampled_from(ENCODINGS),
    other=st.booleans(),
    zstd=st.booleans(),
    unit=st.integers(1, 40),
)
def test_mds_windows_are_one_stream_across_files(
    tmp_path_factory, docs, cuts, files, encoding, other, zstd, unit
):
    """llm-foundry's concat_tokens: windows of one stream with an EOS after each
    document, in files of any sizes, any encoding, other columns beside the tokens,
    compressed or not: an n-gram across a window or a file boundary is counted once."""
    if not any(docs):
        return  # an input without tokens is refused, as for every format
    stream = [t for d in docs for t in [*d, SEP]]
    samples = [
        {"tokens": w, "id": i, "text": "x" * (i % 3)}
        for i, w in enumerate(windows(stream, _cut(cuts, len(stream))))
    ]
    per_file = split(files, len(samples))
    columns = {"tokens": encoding} | ({"id": "int", "text": "str"} if other else {})
    tmp = tmp_path_factory.mktemp("mds")
    write_mds(tmp / "in", samples, columns, per_file, "zstd" if zstd else None)
    like_flat(tmp, [tmp / "in"], docs, unit)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    docs=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=12), min_size=1, max_size=14),
    files=st.lists(st.integers(1, 5), min_size=1, max_size=5),
    zstd=st.booleans(),
    unit=st.integers(2, 40),
)
def test_mds_samples_as_documents_build_like_parquet(tmp_path_factory, docs, files, zstd, unit):
    per_file = split(files, len(docs))
    tmp = tmp_path_factory.mktemp("mdsd")
    samples = [{"input_ids": d} for d in docs]  # the Hugging Face name
    write_mds(
        tmp / "in",
        samples,
        {"input_ids": "ndarray:int32"},
        per_file,
        "zstd" if zstd else None,
    )
    like_parquet(tmp, [tmp / "in"], docs, unit, samples_are_documents=True)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    docs=st.lists(st.lists(st.integers(1, 5), max_size=12), min_size=1, max_size=14),
    chunks=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    dtype=st.sampled_from(["int32", "uint16", "int64"]),
    zstd=st.booleans(),
    unit=st.integers(1, 40),
)
def test_litdata_items_build_as_their_documents(tmp_path_factory, docs, chunks, dtype, zstd, unit):
    """litgpt's TokensLoader items (a document each, EOS last), in chunks of any sizes:
    as one stream a chunk at separators, and as documents each."""
    if not any(docs):
        return
    tmp = tmp_path_factory.mktemp("lit")
    items = [[*d, SEP] for d in docs]
    per = split(chunks, len(items))
    write_litdata(tmp / "in", items, per, dtype, "zstd" if zstd else None)
    like_flat(tmp, [tmp / "in"], docs, unit)
    write_litdata(tmp / "docs", docs, per, dtype, "zstd" if zstd else None)
    like_parquet(
        tmp_path_factory.mktemp("litd"), [tmp / "docs"], docs, unit, samples_are_documents=True
    )


def _docs(seed, n=60):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(1, 30, int(rng.integers(0, 40)))] for _ in range(n)]


def _mds_writer():
    """MosaicML Streaming's MDSWriter, without the package's own import of its datasets
    (they need torch and torchvision; the writer needs neither)."""
    import importlib.util
    import sys
    import types

    if "streaming.base.format.mds.writer" in sys.modules:
        return sys.modules["streaming.base.format.mds.writer"].MDSWriter
    spec = importlib.util.find_spec("streaming")
    if spec is None or spec.origin is None:
        pytest.skip("mosaicml-streaming is not installed (it requires torch: not in the extra)")
    root = os.path.dirname(spec.origin)
    for name in ("streaming", "streaming.base", "streaming.base.format"):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [os.path.join(root, *name.split(".")[1:])]
            sys.modules[name] = mod
    from streaming.base.format.mds.writer import MDSWriter

    return MDSWriter


@pytest.mark.parametrize("how", ["ndarray:int32", "bytes+zstd"])
def test_an_mds_dataset_from_mdswriter_is_read_as_written(tmp_path, how):
    """llm-foundry's concat_tokens, written by Streaming's own MDSWriter (small shards so
    that windows and documents cross files): the stream's table."""
    writer = _mds_writer()
    docs = _docs(3)
    stream = np.asarray([t for d in docs for t in [*d, SEP]], np.int64)
    encoding, _, zstd = how.partition("+")
    columns = {"tokens": encoding, "id": "int"}
    with writer(
        out=str(tmp_path / "in"), columns=columns, compression=zstd or None, size_limit=1 << 10
    ) as out:
        for i in range(0, len(stream) - 16, 16):  # windows of 16; the rest dropped, as theirs
            w = stream[i : i + 16]
            out.write(
                {"tokens": w.astype(np.int32) if encoding != "bytes" else w.tobytes(), "id": i}
            )
    assert len(os.listdir(tmp_path / "in")) > 3
    kept = stream[: (len(stream) - 1) // 16 * 16].tolist()
    cut = [[]]
    for t in kept:
        cut.append([]) if t == SEP else cut[-1].append(t)
    build(None, [tmp_path / "in"], tmp_path / "t", doc_sep=SEP, unit_tokens=50, **KW)
    assert result(tmp_path / "t") == select([d for d in cut if d], 4, 2, None)
    assert manifest(tmp_path / "t")["inputs"][0]["format"] == "mds"


@pytest.mark.parametrize("zstd", [False, True])
def test_a_litdata_dataset_from_optimize_is_read_as_written(tmp_path, zstd):
    """litgpt's layout, written by litdata.optimize with TokensLoader: a document an
    item, EOS last."""
    pytest.importorskip("torch", reason="litdata requires torch (not in the test extra)")
    litdata = pytest.importorskip("litdata", reason="litdata is not installed")
    from litdata.streaming.item_loader import TokensLoader

    docs = _docs(4)
    litdata.optimize(
        fn=_litdata_item,
        inputs=[[*d, SEP] for d in docs],
        output_dir=str(tmp_path / "in"),
        chunk_bytes="300b",
        item_loader=TokensLoader(),
        num_workers=1,
        **({"compression": "zstd", "compression_level": "chunk"} if zstd else {}),
    )
    names = os.listdir(tmp_path / "in")
    assert len(names) > 3 and any(".zstd." in n for n in names) == zstd
    like_flat(tmp_path, [tmp_path / "in"], docs, 50)


def _litdata_item(tokens):
    import torch

    yield torch.tensor(tokens, dtype=torch.int32)


def _edit_index(folder, change):
    path = os.path.join(folder, "index.json")
    with open(path) as f:
        doc = json.load(f)
    change(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


def _spoil(path, at, data):
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _mds(folder, zstd=False, encoding="ndarray:int32"):
    samples = [{"tokens": [1, 2, 3, 4, 5, 6][: 1 + i % 6]} for i in range(12)]
    write_mds(folder, samples, {"tokens": encoding}, [4, 4, 4], "zstd" if zstd else None)


def _set_shard(i, key, value):
    return lambda doc: doc["shards"][i].__setitem__(key, value)


BAD_MDS = {
    "a listed shard missing": (
        lambda d: os.remove(d / "shard.00001.mds"),
        "index.json",
        "lists shard.00001.mds, which is missing",
    ),
    "not listed": (
        lambda d: _edit_index(d, lambda doc: doc["shards"].pop()),
        "shard.00002.mds",
        "not listed in its",
    ),
    "truncated": (
        lambda d: open(d / "shard.00000.mds", "r+b").truncate(60),
        "shard.00000.mds",
        "60 bytes, its index says",
    ),
    "sample count": (
        lambda d: _edit_index(d, _set_shard(0, "samples", 5)),
        "shard.00000.mds",
        "holds 4 samples, its index says 5",
    ),
    "offsets": (
        lambda d: _spoil(d / "shard.00001.mds", 8, np.uint32(1 << 30).tobytes()),
        "shard.00001.mds",
        "offsets are not in order",
    ),
    "float tokens": (
        lambda d: _edit_index(d, _set_shard(0, "column_encodings", ["ndarray:float32"])),
        "shard.00000.mds",
        "is ndarray:float32; fgram reads ndarray of ints or bytes",
    ),
    "no such column": (
        lambda d: _edit_index(d, _set_shard(0, "column_names", ["text"])),
        "shard.00000.mds",
        "no column 'tokens' (columns: text)",
    ),
    "another compression": (
        lambda d: _edit_index(d, _set_shard(0, "compression", "br")),
        "shard.00000.mds.zstd",
        "compressed with 'br'; fgram reads zstd",
    ),
    "does not decompress": (
        lambda d: _spoil(d / "shard.00001.mds.zstd", 0, b"\x00" * 8),
        "shard.00001.mds.zstd",
        "does not decompress as zstd",
    ),
    "no index": (lambda d: os.remove(d / "index.json"), "index.json", "is missing"),
}


BAD_LITDATA = {
    "a listed chunk missing": (
        lambda d: os.remove(d / "chunk-0-1.bin"),
        "index.json",
        "lists chunk-0-1.bin, which is missing",
    ),
    "a pytree": (
        lambda d: _edit_index(d, lambda doc: doc["config"].update(data_format=["int", "str"])),
        "chunk-0-0.bin",
        "fgram reads TokensLoader chunks",
    ),
    "float items": (
        lambda d: _edit_index(
            d, lambda doc: doc["config"].update(data_format=["no_header_tensor:0"])
        ),
        "chunk-0-0.bin",
        "fgram reads TokensLoader chunks",
    ),
    "dim": (
        lambda d: _edit_index(d, lambda doc: doc["chunks"][0].update(dim=3)),
        "chunk-0-0.bin",
        "tokens, its index says 3",
    ),
}


def _litdata(folder, zstd=False):
    write_litdata(folder, [[1, 2, 3, SEP], [4, 5, SEP], [6, SEP]], [2, 1])


BAD = {("mds", case): (_mds, *how) for case, how in BAD_MDS.items()}
BAD |= {("litdata", case): (_litdata, *how) for case, how in BAD_LITDATA.items()}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_broken_dataset_is_one_line_naming_the_file(tmp_path, case):
    write, spoil, which, says = BAD[case]
    write(tmp_path / "in", zstd=case[1] in ("another compression", "does not decompress"))
    spoil(tmp_path / "in")
    name = re.escape(f"{tmp_path / 'in' / which}: ")
    with pytest.raises(InputError, match=name + ".*" + re.escape(says)):
        build(None, [tmp_path / "in"], tmp_path / "t", doc_sep=SEP, **KW)
    assert not (tmp_path / "t").exists()


def test_mds_and_litdata_on_an_object_store_as_locally(tmp_path, s3):
    """Build (the folder, or its index.json), annotate, coverage and refresh take MDS
    and LitData folders in a bucket; a file added to an MDS index is a change of the
    one before it too (the stream runs on into it): refresh equals a build."""
    from fgram.pipeline.io.storage import locate

    bucket = s3.bucket()
    docs = _docs(9, 80)
    stream = [t for d in docs[:60] for t in [*d, SEP]]
    samples = [{"tokens": w} for w in windows(stream, list(range(7, len(stream), 7)))]
    write_mds(tmp_path / "mds", samples, {"tokens": "ndarray:int32"}, [30, 40, 10**6], "zstd")
    write_litdata(tmp_path / "lit", [[*d, SEP] for d in docs[60:]], [5, 10, 5])
    for folder in ("mds", "lit"):
        for name in os.listdir(tmp_path / folder):
            locate(f"s3://{bucket}/{folder}/{name}").upload(str(tmp_path / folder / name))
    inputs = [f"s3://{bucket}/mds/index.json", f"s3://{bucket}/lit"]
    flat = str(tmp_path / "same.bin")
    np.asarray([t for d in docs for t in [*d, SEP]], np.uint16).tofile(flat)
    kw = dict(KW, doc_sep=SEP, unit_tokens=101)
    build(None, inputs, tmp_path / "t", **kw)
    build(None, [flat], tmp_path / "f", **kw)
    assert result(tmp_path / "t") == result(tmp_path / "f") == select(docs, 4, 2, None)
    fgram.index(tmp_path / "t")
    opts = dict(engine="local", unit_tokens=50, doc_sep=SEP)
    fgram.annotate(tmp_path / "t", inputs, f"s3://{bucket}/tags", **opts)
    fgram.annotate(tmp_path / "t", [flat], tmp_path / "ftags", **opts)
    n = len(stream) + sum(len(d) + 1 for d in docs[60:])
    assert tags_read(f"s3://{bucket}/tags", n) == tags_read(tmp_path / "ftags", n)
    cov = fgram.coverage(tmp_path / "t", inputs, **opts)
    assert cov == fgram.coverage(tmp_path / "t", [flat], **opts)
    grow = f"s3://{bucket}/grow"
    write_mds(tmp_path / "g1", samples[:70], {"tokens": "ndarray:int32"}, [30, 40], "zstd")
    write_mds(tmp_path / "g2", samples, {"tokens": "ndarray:int32"}, [30, 40, 10**6], "zstd")
    for name in os.listdir(tmp_path / "g1"):
        locate(f"{grow}/{name}").upload(str(tmp_path / "g1" / name))
    r = tmp_path / "r"
    fgram.refresh(r, [grow], **kw)
    for name in ("shard.00002.mds.zstd", "index.json"):  # a file added after the last
        locate(f"{grow}/{name}").upload(str(tmp_path / "g2" / name))
    m = fgram.refresh(r, [grow], **kw)
    assert m["built"] and result(r / "current") == select(docs[:60], 4, 2, None)
    assert m["manifest"]["refresh"]["kept_shards"] == 1  # the one before the last: again


def test_report_heldout_reads_mds_litdata_and_megatron_as_parquet(tmp_path):
    """``report --heldout``: the coverage curve of held-out MDS, LitData or Megatron
    shards is the one of the same documents as Parquet."""
    pytest.importorskip("matplotlib", reason="the report's plots need matplotlib")
    from helpers import megatron, write_parquet

    held = [d for d in _docs(6, 30) if d]
    build(
        None, [write_parquet(str(tmp_path / "train.parquet"), _docs(5, 80))], tmp_path / "t", **KW
    )
    fgram.index(tmp_path / "t")
    write_mds(tmp_path / "mds", [{"tokens": d} for d in held], {"tokens": "ndarray"}, [7, 30])
    write_litdata(tmp_path / "lit", [[*d, SEP] for d in held], [9, 30])
    megatron(tmp_path / "mg", [[d] for d in held])
    ways = {
        "parquet": ([write_parquet(str(tmp_path / "held.parquet"), held)], {}),
        "mds": ([tmp_path / "mds"], {"samples_are_documents": True}),
        "litdata": ([tmp_path / "lit"], {"doc_sep": SEP}),
        "megatron": ([tmp_path / "mg"], {}),
    }
    curves = {
        name: fgram.report(
            tmp_path / "t",
            tmp_path / f"{name}.html",
            heldout=inputs,
            sizes=[1, 5, 20],
            coverage={"engine": "local", **read},
        )["coverage"]["by_size"]
        for name, (inputs, read) in ways.items()
    }
    assert curves["parquet"][-1]["unmatched"] < curves["parquet"][-1]["positions"]
    assert curves["mds"] == curves["litdata"] == curves["megatron"] == curves["parquet"]


def test_an_index_json_names_the_files_beside_it_and_an_unused_doc_sep_is_said(
    tmp_path, capfd, monkeypatch
):
    """Given an ``index.json``, the files beside it are read (a build output kept in a
    folder below is not an input); ``--doc-sep`` where every input's documents come
    from its format is a warning that says so."""
    docs = _docs(11, 30)
    write_mds(tmp_path / "in", [{"tokens": d} for d in docs if d], {"tokens": "ndarray"}, [9, 99])
    build(None, [tmp_path / "in"], tmp_path / "in" / "t", samples_are_documents=True, **KW)
    capfd.readouterr()
    build(None, [tmp_path / "in" / "index.json"], tmp_path / "t2", samples_are_documents=True,
          doc_sep=SEP, **KW)  # fmt: skip
    assert result(tmp_path / "t2") == result(tmp_path / "in" / "t") == select(docs, 4, 2, None)
    err = capfd.readouterr().err
    assert "--doc-sep 0 is not used: the documents of these inputs (mds) are where" in err
    from fgram.pipeline.formats import inputs

    monkeypatch.setattr(inputs, "_WARNED", set())  # said once a process: again here
    build(None, [tmp_path / "in" / "index.json"], tmp_path / "t3", doc_sep=SEP, **KW)
    assert "is not used" not in capfd.readouterr().err  # windows: split at it
