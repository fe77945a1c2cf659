"""fgram annotate, the training reader and coverage, against a brute-force oracle."""

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import build, result, write_bin, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

import fgram
from fgram.cli import cli
from fgram.jobs.annotate import run_annotate
from fgram.pipeline.config.commands import AnnotateConfig
from fgram.pipeline.errors import FgramError
from fgram.pipeline.tables.index import write_index
from fgram.pipeline.tables.tags import training_sequences

HSET = settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
docs_st = st.lists(st.lists(st.integers(1, 4), max_size=30), min_size=1, max_size=8)


def _table(d, docs, k, size=None):
    src = write_parquet(str(d / "train.parquet"), docs + [[1, 2, 3, 1, 2, 3]])
    out = d / "table"
    build(None, [src], out, max_len=k, min_count=2, size=size, engine="local")
    write_index(str(out))
    return str(out), {g: i for i, (g, _) in enumerate(result(out))}


def _flat_oracle(fgrams, flat, sep, k):
    """Tags of a flat stream: separators isolate documents and get (-1, 0)."""
    starts = sorted(
        {i for i, t in enumerate(flat) if t == sep}
        | {i + 1 for i, t in enumerate(flat) if t == sep}
    )
    fid, mlen = oracle_match(fgrams, flat, [s for s in starts if s < len(flat)], k)
    for i, t in enumerate(flat):
        if t == sep:
            fid[i], mlen[i] = -1, 0
    return fid, mlen


@pytest.mark.slow
@HSET
@given(docs=docs_st, held=docs_st, k=st.integers(2, 5), unit=st.integers(1, 9))
def test_parquet_tags_match_oracle(tmp_path_factory, docs, held, k, unit):
    d = tmp_path_factory.mktemp("ann")
    table, fgrams = _table(d, docs, k)
    src = write_parquet(str(d / "held.parquet"), held, rows_per_group=2)
    m = run_annotate(
        AnnotateConfig(
            table=table, inputs=[src], output=str(d / "tags"), engine="local", unit_tokens=unit
        )
    )
    files = sorted(f for f in os.listdir(d / "tags" / "tags"))
    t = (
        pq.read_table([str(d / "tags" / "tags" / f) for f in files])
        if len(files) > 1
        else pq.read_table(str(d / "tags" / "tags" / files[0]))
    )
    assert t.column("doc_id").to_pylist() == list(range(len(held)))
    for doc, ids, lens in zip(
        held, t.column("fgram_ids").to_pylist(), t.column("match_len").to_pylist()
    ):
        assert (ids, lens) == tuple(map(list, oracle_match(fgrams, doc, [0], k)))
    hist = {}
    for doc in held:
        for n in oracle_match(fgrams, doc, [0], k)[1]:
            hist[n] = hist.get(n, 0) + 1
    assert m["coverage"]["positions"] == sum(map(len, held))
    assert m["coverage"]["unmatched"] == hist.get(1, 0)
    assert m["coverage"]["matched_by_length"] == {str(n): hist.get(n, 0) for n in range(2, k + 1)}


@HSET
@given(
    docs=docs_st, held=docs_st, k=st.integers(2, 5), unit=st.integers(1, 9), seq=st.integers(1, 12)
)
def test_flat_tags_and_reader_truncation(tmp_path_factory, docs, held, k, unit, seq):
    d = tmp_path_factory.mktemp("flat")
    table, fgrams = _table(d, docs, k)
    write_bin(str(d / "held.bin"), held, sep=0)
    flat = np.fromfile(d / "held.bin", dtype=np.uint16).tolist()
    run_annotate(
        AnnotateConfig(
            table=table,
            inputs=[str(d / "held.bin")],
            output=str(d / "tags"),
            doc_sep=0,
            engine="local",
            unit_tokens=unit,
        )
    )
    fid = np.load(d / "tags" / "tags" / "held.bin.fgid.npy")
    mlen = np.load(d / "tags" / "tags" / "held.bin.mlen.npy")
    exp_f, exp_m = _flat_oracle(fgrams, flat, 0, k)
    assert fid.tolist() == exp_f and mlen.tolist() == exp_m
    # the reader: each window is matched as if nothing came before it
    got = list(training_sequences(str(d / "tags"), seq))
    assert len(got) == len(flat) // seq
    for w, (t, f, m) in enumerate(got):
        window = flat[w * seq : (w + 1) * seq]
        assert t.tolist() == window
        ef, em = _flat_oracle(fgrams, window, 0, k)
        assert f.tolist() == ef and m.tolist() == em


@HSET
@given(
    docs=docs_st,
    held=docs_st,
    k=st.integers(2, 5),
    unit=st.integers(1, 9),
    length=st.integers(1, 12),
    parquet=st.booleans(),
)
def test_tags_read_at_every_offset_equal_the_windows_alone(
    tmp_path_factory, docs, held, k, unit, length, parquet
):
    """`FgramTags.window` at every offset (flat tags by range, Parquet's a unit at a
    time) is the match of the window's tokens alone; `windows` stacks the same; a
    window past the end is refused."""
    d = tmp_path_factory.mktemp("win")
    table, fgrams = _table(d, docs, k)
    if parquet:
        src = write_parquet(str(d / "held.parquet"), held, rows_per_group=2)
        stream = [t for doc in held for t in doc]
        ends = np.cumsum([len(doc) for doc in held]).tolist()
        opts = {}
    else:
        src = write_bin(str(d / "held.bin"), held, sep=0)
        stream = np.fromfile(src, dtype=np.uint16).tolist()
        opts = {"doc_sep": 0}
    fgram.annotate(table, [src], d / "tags", engine="local", unit_tokens=unit, **opts)
    tags = fgram.FgramTags.open(d / "tags")
    assert len(tags) == len(stream)
    offsets = list(range(0, len(stream) - length + 1))
    for o in offsets:
        t, f, m = tags.window(o, length)
        window = stream[o : o + length]
        if parquet:
            starts = [e - o for e in ends if 0 < e - o < length]
            want = oracle_match(fgrams, window, starts, k)
        else:
            want = _flat_oracle(fgrams, window, 0, k)
        assert t.tolist() == window and (f.tolist(), m.tolist()) == tuple(map(list, want))
    if offsets:
        T, F, M = tags.windows(offsets[::-1], length)
        for row, o in enumerate(offsets[::-1]):
            t, f, m = tags.window(o, length)
            assert (T[row].tolist(), F[row].tolist(), M[row].tolist()) == (
                t.tolist(), f.tolist(), m.tolist()
            )  # fmt: skip
    with pytest.raises(FgramError, match="outside the tags"):
        tags.window(len(stream) - length + 1, length)


def test_spark_annotate_stale_and_cli(spark, tmp_path):
    table, fgrams = _table(tmp_path, [[1, 2, 3, 4, 1, 2, 3, 4]] * 3, 4)
    src = write_parquet(str(tmp_path / "held.parquet"), [[1, 2, 3, 4], [4, 1, 2]])
    res = CliRunner().invoke(cli, ["annotate", table, src, "-o", str(tmp_path / "tags")])
    assert res.exit_code == 0, res.output
    assert "mean match length" in res.output
    m = json.load(open(tmp_path / "tags" / "manifest.json"))
    assert m["table"]["fgrams"] == len(fgrams)
    seqs = list(training_sequences(str(tmp_path / "tags"), 7))
    assert len(seqs) == 1 and seqs[0][0].tolist() == [1, 2, 3, 4, 4, 1, 2]
    res = CliRunner().invoke(cli, ["coverage", table, src, "--engine", "local"])
    assert res.exit_code == 0 and "none" in res.output
    # rebuild the table: the tags are stale now
    build(
        None,
        [tmp_path / "train.parquet"],
        tmp_path / "table",
        max_len=3,
        min_count=2,
        engine="local",
        overwrite=True,
    )
    write_index(table)
    with pytest.raises(FgramError, match="stale"):
        next(training_sequences(str(tmp_path / "tags"), 4))
    res = CliRunner().invoke(
        cli, ["annotate", table, str(tmp_path / "nope.parquet"), "-o", str(tmp_path / "t2")]
    )
    assert res.exit_code == 2 and "no such file" in res.output
    assert not (tmp_path / "t2").exists()
    res = CliRunner().invoke(
        cli, ["annotate", str(tmp_path / "nothing"), src, "-o", str(tmp_path / "t3")]
    )
    assert res.exit_code == 2 and "index.json: missing; run `fgram index" in res.output


def test_a_rewritten_index_at_the_same_path_is_read_afresh(spark, tmp_path):
    """Workers keep the index between tasks; after the table and its index are rewritten
    in place (same path, same process), annotate reads the new one."""
    from fgram.pipeline.tables.index import FgramIndex

    a = [[1, 2, 3, 1, 2, 3, 1, 2, 3]] * 3
    b = [[4, 5, 6, 4, 5, 6, 4, 5, 6]] * 3
    write_parquet(str(tmp_path / "a.parquet"), a)
    write_parquet(str(tmp_path / "b.parquet"), b, rows_per_group=1)  # a task per row group
    for src, overwrite in (("a", False), ("b", True)):
        build(
            spark,
            [tmp_path / f"{src}.parquet"],
            tmp_path / "t",
            max_len=3,
            min_count=2,
            overwrite=overwrite,
        )
        write_index(str(tmp_path / "t"))
        m = run_annotate(
            AnnotateConfig(table=str(tmp_path / "t"), inputs=[str(tmp_path / "b.parquet")]), spark
        )
        hit = m["coverage"]["positions"] - m["coverage"]["unmatched"]
        index = FgramIndex.open(str(tmp_path / "t"))
        want = sum(int((index.match(d)[0] >= 0).sum()) for d in b)
        assert hit == want and (hit == 0) == (src == "a"), (src, hit, want)
