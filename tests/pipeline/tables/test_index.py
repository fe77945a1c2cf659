"""The f-gram index against a brute-force longest-match oracle."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import build, result, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_match

from fgram.cli import cli
from fgram.pipeline.errors import FgramError
from fgram.pipeline.kernels.keys import mix
from fgram.pipeline.tables.index import FgramIndex, HashTable, write_index


@given(
    st.lists(st.integers(0, 2**20), unique=True, max_size=300),
    st.lists(st.integers(0, 2**20), max_size=100),
)
def test_hash_table_exact(keys, queries):
    k = mix(np.array(keys, dtype=np.uint64))
    t = HashTable.build(k, np.arange(len(keys)))
    q = mix(np.array(queries + keys[:10], dtype=np.uint64))
    pos = {v: i for i, v in enumerate(k.tolist())}
    assert t.find(q).tolist() == [pos.get(v, -1) for v in q.tolist()]


@pytest.mark.slow
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.lists(st.integers(0, 4), max_size=40), min_size=1, max_size=8),
    k=st.integers(2, 6),
    size=st.one_of(st.none(), st.integers(1, 30)),
    probe=st.lists(st.integers(0, 5), max_size=60),
    cuts=st.lists(st.integers(0, 59), max_size=4),
    lanes=st.integers(1, 70),
)
def test_match_and_ids_equal_oracle(tmp_path_factory, docs, k, size, probe, cuts, lanes):
    d = tmp_path_factory.mktemp("idx")
    write_parquet(str(d / "a.parquet"), docs + [[1, 2, 3, 1, 2, 3]])
    out = d / "o"
    build(None, [d / "a.parquet"], out, max_len=k, min_count=2, size=size, engine="local")
    write_index(str(out))
    index = FgramIndex.open(str(out))
    fgrams = {g: i for i, (g, _) in enumerate(result(out))}
    starts = sorted({c for c in cuts if c < len(probe)})
    exp_fid, exp_len = oracle_match(fgrams, probe, starts, k)
    for n_lanes, interpreted in ((lanes, False), (1, False), (lanes, True)):
        # stretches matched side by side, each with its warm-up; the kernel's code run by
        # the interpreter (a short context: `fgram lookup`) alike
        fid, mlen = index.match(
            np.array(probe, dtype=np.int64), starts, lanes=n_lanes, interpreted=interpreted
        )
        assert fid.tolist() == exp_fid and mlen.tolist() == exp_len
    grams = list(fgrams) + [tuple(probe[:3]), (9, 9), tuple(probe[:k])]
    assert index.ids(grams).tolist() == [
        fgrams.get(tuple(g), -1) if len(g) >= 2 else -1 for g in grams
    ]


def test_stale_index_refused_and_cli(tmp_path):
    write_parquet(str(tmp_path / "a.parquet"), [[1, 2, 3, 1, 2, 3, 1, 2]] * 3)
    out = tmp_path / "o"
    build(None, [tmp_path / "a.parquet"], out, min_count=2, engine="local")
    res = CliRunner().invoke(cli, ["index", str(out)])
    assert res.exit_code == 0, res.output
    assert json.load(open(out / "index" / "index.json"))["fgrams"] > 0
    FgramIndex.open(str(out))
    ram = FgramIndex.open(str(out), mode="ram")
    toks = np.array([1, 2, 3, 1, 2, 3, 9, 1, 2], dtype=np.int64)
    assert [a.tolist() for a in ram.match(toks)] == [
        a.tolist() for a in FgramIndex.open(str(out)).match(toks)
    ]
    assert ram.match(toks)[1].max() > 1
    meta = json.load(open(out / "index" / "index.json"))
    json.dump(dict(meta, version=1), open(out / "index" / "index.json", "w"))
    with pytest.raises(FgramError, match="version 2; rebuild"):
        FgramIndex.open(str(out))
    json.dump(meta, open(out / "index" / "index.json", "w"))
    m = json.load(open(out / "manifest.json"))
    m["seconds"] = -1
    json.dump(m, open(out / "manifest.json", "w"))
    with pytest.raises(FgramError, match="another f-gram table"):
        FgramIndex.open(str(out))
    res = CliRunner().invoke(cli, ["index", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "nope: no such file or folder" in res.output
