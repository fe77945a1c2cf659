"""Coverage against S' <= S from one table (`fgram coverage --sizes`), against the
brute-force oracle at each S' and against tables built at each S' separately."""

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import build, result, write_bin, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import oracle_coverage, oracle_match, select

import fgram
from fgram.cli import cli
from fgram.pipeline.config.options import human, parse_count
from fgram.pipeline.config.options import parse_counts as parse_sizes
from fgram.pipeline.errors import ConfigError
from fgram.pipeline.tables.coverage import count_by_size, coverage_by_size, default_sizes
from fgram.pipeline.tables.index import write_index

docs_st = st.lists(st.lists(st.integers(1, 5), max_size=40), min_size=1, max_size=8)


def test_parse_sizes_and_their_names():
    assert parse_sizes("10K, 100K,1M,2.5M,1B,10k,7") == [
        7,
        10_000,
        100_000,
        10**6,
        2_500_000,
        10**9,
    ]
    assert [human(n) for n in (7, 1234, 1500, 10_000, 2_500_000, 10**9)] == [
        "7",
        "1234",
        "1.5K",
        "10K",
        "2.5M",
        "1B",
    ]
    for n in (1, 999, 1000, 123_000, 2_500_000, 10**9):
        assert parse_sizes(human(n)) == [n]
    for bad in ("", "0", "1.5", "ten", "10X", "-5", "1K,,2K"):
        with pytest.raises(ConfigError, match="--sizes: .* is not a number of f-grams"):
            parse_sizes(bad)
    assert parse_count("16M") == 16_000_000 and parse_count(7) == 7
    with pytest.raises(ConfigError, match="-S: '1.5' is not a count"):
        parse_count("1.5", "-S")
    assert default_sizes(100_000) == [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000,
                                      20_000, 50_000, 100_000]  # fmt: skip
    grid = default_sizes(12_345_678)
    assert grid[0] == 1000 and grid[-1] == 12_345_678 and grid == sorted(set(grid))
    assert default_sizes(3) == [3] and default_sizes(0) == [1]


@settings(max_examples=200)
@given(
    docs=docs_st,
    held=docs_st,
    k=st.integers(2, 6),
    sizes=st.lists(st.integers(1, 80), min_size=1, max_size=6),
)
def test_one_walk_answers_every_size(docs, held, k, sizes):
    """The kernel on the oracle's own table and matches: at every S', the coverage of
    the first S' rows, matched by brute force."""
    ranked = select(docs, k, 1, None)
    ids = {g: i for i, (g, _) in enumerate(ranked)}
    suffix = np.array([ids[g[1:]] if len(g) > 2 else -1 for g, _ in ranked], np.int32)
    sizes = sorted(set(sizes))
    hist = [0] * (k + 1)
    counts = np.zeros((k + 1, len(sizes) + 1), np.int64)
    for doc in held:
        fid, mlen = oracle_match(ids, doc, [0], k)
        for n in mlen:
            hist[n] += 1
        counts += count_by_size(np.array(fid), np.array(mlen), suffix, sizes, k)
    got = coverage_by_size(hist, counts, sizes, len(ranked))
    assert [c["size"] for c in got] == sizes
    for row, size in zip(got, sizes):
        assert row["fgrams"] == min(size, len(ranked))
        assert {k: v for k, v in row.items() if k not in ("size", "fgrams")} == oracle_coverage(
            ranked, size, held, k
        )


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=docs_st,
    held=docs_st,
    k=st.integers(2, 5),
    size=st.one_of(st.none(), st.integers(1, 40)),
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=5),
    flat=st.booleans(),
    unit=st.integers(1, 50),
)
def test_coverage_by_size_equals_oracle(tmp_path_factory, docs, held, k, size, sizes, flat, unit):
    """`fgram coverage --sizes` of one build: at each S', the oracle's coverage of the
    oracle's top S' (a build that kept every n-gram answers sizes past its rows too)."""
    d = tmp_path_factory.mktemp("cov")
    docs = docs + [[1, 2, 3, 1, 2, 3]]
    build(None, [write_parquet(str(d / "t.parquet"), docs)], d / "t", max_len=k, min_count=2,
          size=size, engine="local")  # fmt: skip
    write_index(str(d / "t"))
    rows = len(result(d / "t"))
    if size is not None:
        sizes = [min(s, rows) for s in sizes]
    opts = {"doc_sep": 0} if flat else {}
    src = (
        write_bin(str(d / "h.bin"), held, 0) if flat else write_parquet(str(d / "h.parquet"), held)
    )
    cov = fgram.coverage(d / "t", src, engine="local", unit_tokens=unit, sizes=sizes, **opts)
    ranked = select(docs, k, 2, None)
    assert [r["size"] for r in cov["by_size"]] == sorted(set(sizes))
    for row in cov["by_size"]:
        expect = oracle_coverage(ranked, row["size"], held, k)
        assert {k: v for k, v in row.items() if k not in ("size", "fgrams")} == expect
        assert row["fgrams"] == min(row["size"], rows)
    whole = {k: v for k, v in cov.items() if k != "by_size"}
    assert whole == oracle_coverage(ranked, size or len(ranked), held, k)


def test_each_size_built_separately(tmp_path, spark):
    """One build at S with --sizes against a build and a coverage run at each S' (Spark
    and the CLI), on a generated corpus."""
    from fgram.pipeline.formats.synth import generate

    generate(str(tmp_path / "c"), 60_000, vocab=300, seed=3, fmt="bin")
    generate(str(tmp_path / "h"), 20_000, vocab=300, seed=4, book_seed=3, fmt="bin")
    shard = ["--doc-sep", "0"]
    big, sizes = 3000, [10, 100, 500, 2000, 3000]
    runs = {}
    for s in [big, *sizes[:-1]]:
        build(spark, [tmp_path / "c"], tmp_path / f"t{s}", doc_sep=0, size=s, max_len=4)
        write_index(str(tmp_path / f"t{s}"))
        runs[s] = fgram.coverage(tmp_path / f"t{s}", tmp_path / "h", spark=spark, doc_sep=0)
    one = CliRunner().invoke(
        cli,
        ["coverage", str(tmp_path / f"t{big}"), str(tmp_path / "h"), *shard,
         "--sizes", ",".join(map(str, sizes)), "--json"],
    )  # fmt: skip
    assert one.exit_code == 0, one.output
    import json

    by_size = json.loads(one.stdout)["details"]["coverage"]["by_size"]
    assert [r["size"] for r in by_size] == sizes
    for row in by_size:
        assert {k: v for k, v in row.items() if k not in ("size", "fgrams")} == runs[row["size"]]
        assert row["fgrams"] == row["size"]
    shares = [1 - r["share_unmatched"] for r in by_size]
    assert shares == sorted(shares) and shares[0] < shares[-1]  # more rows, more matched
    # the same as text
    res = CliRunner().invoke(
        cli, ["coverage", str(tmp_path / f"t{big}"), str(tmp_path / "h"), *shard, "--sizes",
              "10,2K"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["S", "f-grams"])
    assert [line.split()[0] for line in lines[head + 1 : head + 3]] == ["10", "2K"]
    assert lines[head + 2].split()[2] == f"{1 - runs[2000]['share_unmatched']:.2%}"


def test_sizes_past_the_table_refused(tmp_path):
    docs = [[1, 2, 3, 1, 2, 3, 4, 1, 2]] * 4
    src = write_parquet(str(tmp_path / "a.parquet"), docs)
    build(None, [src], tmp_path / "t", min_count=2, size=5, engine="local")
    write_index(str(tmp_path / "t"))
    with pytest.raises(ConfigError, match=r"--sizes 6: .* holds the top 5 f-grams"):
        fgram.coverage(tmp_path / "t", src, engine="local", sizes=[2, 6])
    res = CliRunner().invoke(
        cli, ["coverage", str(tmp_path / "t"), src, "--engine", "local", "--sizes", "2,x"]
    )
    assert res.exit_code == 2 and "--sizes: 'x' is not a number of f-grams" in res.output
    res = CliRunner().invoke(
        cli, ["coverage", str(tmp_path / "t"), src, "--engine", "local", "--sizes", "1K"]
    )
    assert res.exit_code == 2 and "--sizes 1K:" in res.output and "holds the top 5" in res.output
    # a build that kept all it could answers any size
    build(None, [src], tmp_path / "all", min_count=2, engine="local")
    write_index(str(tmp_path / "all"))
    cov = fgram.coverage(tmp_path / "all", src, engine="local", sizes=[3, 10**6])
    rows = len(result(tmp_path / "all"))
    assert cov["by_size"][1]["fgrams"] == rows
    assert {k: v for k, v in cov["by_size"][1].items() if k not in ("size", "fgrams")} == {
        k: v for k, v in cov.items() if k != "by_size"
    }
