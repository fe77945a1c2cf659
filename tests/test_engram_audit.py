"""The Engram collision audit against a brute-force count: a Counter of canonical n-grams,
Engram's hash restated from its description (Python integers, wrapped to int64), then the
definitions (buckets used, n-grams sharing a bucket, occurrences whose bucket holds a
strictly more frequent n-gram, in each head and in every head), on corpora with ties."""

import dataclasses
import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engram import _tokenizer, reference_sizes

from fgram.audit import Order, audit
from fgram.engram import EngramConfig, canonical_map

WRAP = 1 << 64


def _int64(v: int) -> int:
    v %= WRAP
    return v - WRAP if v >= 1 << 63 else v


def reference_multipliers(cfg: EngramConfig, size: int) -> dict:
    half = max(1, (2**63 - 1) // size // 2)
    return {
        layer: [int(r) * 2 + 1 for r in np.random.default_rng(cfg.seed + 10007 * layer)
                .integers(0, half, cfg.max_ngram_size, dtype=np.int64)]
        for layer in cfg.layer_ids
    }  # fmt: skip


def oracle(counts: Counter, cfg: EngramConfig, size: int) -> dict:
    """Per layer, order: each head's (used, sharing, collided) and the every-head
    collided occurrences, by the definitions."""
    mult, sizes, out = reference_multipliers(cfg, size), reference_sizes(cfg), {}
    for layer in cfg.layer_ids:
        out[layer] = {}
        for n in range(2, cfg.max_ngram_size + 1):
            grams = [g for g in counts if len(g) == n]
            mix = {}
            for g in grams:
                m = 0
                for k in range(n):
                    m ^= _int64(g[n - 1 - k] * mult[layer][k])
                mix[g] = m
            heads, collided_in = [], defaultdict(int)
            for p in sizes[layer][n - 2]:
                members = defaultdict(list)
                for g in grams:
                    members[mix[g] % p].append(g)
                top = {b: max(counts[g] for g in ms) for b, ms in members.items()}
                hit = [g for g in grams if top[mix[g] % p] > counts[g]]
                for g in hit:
                    collided_in[g] += 1
                heads.append((
                    len(members),
                    sum(len(ms) for ms in members.values() if len(ms) > 1),
                    sum(counts[g] for g in hit),
                ))  # fmt: skip
            every = sum(counts[g] for g, h in collided_in.items() if h == len(heads))
            out[layer][n] = (heads, every)
    return out


def orders_of(counts: Counter, max_n: int) -> dict:
    out = {}
    for n in range(2, max_n + 1):
        rows = sorted(((g, c) for g, c in counts.items() if len(g) == n), key=lambda r: -r[1])
        toks = np.asarray([g for g, _ in rows], np.int64).reshape(len(rows), n)
        out[n] = Order(toks, np.asarray([c for _, c in rows], np.int64))
    return out


def check_against_oracle(got: dict, counts: Counter, cfg: EngramConfig, size: int) -> None:
    want = oracle(counts, cfg, size)
    for layer, per in want.items():
        for n, (heads, every) in per.items():
            mine = got["layers"][str(layer)][str(n)]
            found = [(h["buckets_used"], h["sharing"], h["collided"]) for h in mine["heads"]]
            assert found == heads
            assert mine["all_heads"]["collided"] == every
            total = sum(c for g, c in counts.items() if len(g) == n)
            assert [h["collided_share"] for h in mine["heads"]] == [
                c / total if total else 0.0 for _, _, c in heads
            ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(st.lists(st.integers(0, 12), max_size=50), min_size=1, max_size=8),
    max_n=st.integers(2, 4),
    heads=st.integers(1, 4),
    sizes=st.lists(st.integers(2, 60) | st.integers(4090, 4200), min_size=3, max_size=3),
    layers=st.lists(st.integers(0, 30), min_size=1, max_size=2, unique=True),
    seed=st.integers(0, 1000),
    vocab=st.integers(13, 5000),
    curve=st.lists(st.integers(2, 80), min_size=1, max_size=3, unique=True),
)
def test_the_audit_is_the_brute_force_count(docs, max_n, heads, sizes, layers, seed, vocab, curve):
    """Small tables in small buckets: many collisions, ties among counts (a tie is not a
    collision: the bucket must hold a strictly more frequent n-gram); the size curve is
    the same count at each size, averaged over layers and heads."""
    counts = Counter(tuple(d[i : i + n]) for d in docs for n in range(2, max_n + 1)
                     for i in range(len(d) - n + 1))  # fmt: skip
    cfg = EngramConfig(engram_vocab_size=sizes[: max_n - 1], max_ngram_size=max_n,
                       n_head_per_ngram=heads, layer_ids=layers, seed=seed)  # fmt: skip
    manifest = {"canonical": {"size": vocab}, "positions": None}
    got = audit(manifest, orders_of(counts, max_n), cfg, sorted(curve), threads=2)
    check_against_oracle(got, counts, cfg, vocab)
    for row in got["sizes"]:
        sized = dataclasses.replace(cfg, engram_vocab_size=[row["size"]] * (max_n - 1))
        want = oracle(counts, sized, vocab)
        for n in range(2, max_n + 1):
            total = sum(c for g, c in counts.items() if len(g) == n)
            shares = [c / total if total else 0.0 for lay in want.values()
                      for _, _, c in lay[n][0]]  # fmt: skip
            every = [lay[n][1] / total if total else 0.0 for lay in want.values()]
            assert row["orders"][str(n)]["collided_share"] == pytest.approx(np.mean(shares))
            assert row["orders"][str(n)]["all_heads_share"] == pytest.approx(np.mean(every))
    for n in range(2, max_n + 1):  # the smallest size of the curve under each mark
        for t, size in got["under"][str(n)].items():
            under = [r["size"] for r in got["sizes"]
                     if r["orders"][str(n)]["collided_share"] < float(t)]  # fmt: skip
            assert size == (under[0] if under else None)


def test_the_audit_of_a_canonical_build_and_its_cut(tmp_path):
    """End to end over `fgram tokenize` shards: build --canonical (min count 2: a cut
    table), `fgram engram-audit --json`: the numbers of the table's n-grams equal the
    brute-force count of the documents' canonical n-grams kept by the cut, and the
    coverage is their occurrences out of every position of the order. A table of tokens
    as they are, or of n-grams shorter than the config's, is refused in one line."""
    pytest.importorskip("transformers", reason="transformers is an optional extra")
    from click.testing import CliRunner
    from oracle import split_flat

    import fgram
    from fgram.cli import cli

    folder = _tokenizer(tmp_path)
    words = ["Café", "café", "CAFÉ", "naïve", "NAÏVE", "Über", "über", "ÜBER", "ﬁ", "①", "x"]
    rng = np.random.default_rng(5)
    lines = [json.dumps({"text": " ".join(rng.choice(words, int(rng.integers(1, 14))))})
             for _ in range(120)]  # fmt: skip
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    tok = str(folder / "tokenizer.json")
    fgram.tokenize([tmp_path / "a.jsonl"], tmp_path / "shards", tok, format="bin", engine="local")
    fgram.build(tmp_path / "t", [tmp_path / "shards"], canonical=True, min_count=2,
                max_len=3, engine="local")  # fmt: skip
    cfg = EngramConfig(engram_vocab_size=[31, 37], max_ngram_size=3, n_head_per_ngram=3,
                       layer_ids=[1, 4], pad_id=1)  # fmt: skip
    (tmp_path / "e.json").write_text(json.dumps(dataclasses.asdict(cfg)))
    run = CliRunner().invoke(
        cli,
        [
            "engram-audit",
            str(tmp_path / "t"),
            "--engram",
            str(tmp_path / "e.json"),
            "--sizes",
            "20,200",
            "--json",
        ],  # fmt: skip
    )
    assert run.exit_code == 0, run.output
    got = json.loads(run.stdout)
    lookup, size = canonical_map(tok)
    shards = json.load(open(tmp_path / "shards" / "manifest.json"))
    flat = np.concatenate(
        [np.fromfile(tmp_path / "shards" / s["name"], np.uint16) for s in shards["shards"]]
    )
    docs = [[int(lookup[t]) for t in d] for d in split_flat(flat.tolist(), shards["doc_sep"])]
    every = Counter(tuple(d[i : i + n]) for d in docs for n in (2, 3)
                    for i in range(len(d) - n + 1))  # fmt: skip
    kept = Counter({g: c for g, c in every.items() if c >= 2})
    assert len(kept) < len(every)  # the cut leaves some out
    check_against_oracle(got, kept, cfg, size)
    for n in (2, 3):
        order = got["orders"][str(n)]
        positions = sum(max(0, len(d) - n + 1) for d in docs)
        occ = sum(c for g, c in kept.items() if len(g) == n)
        assert (order["positions"], order["occurrences"]) == (positions, occ)
        assert order["coverage"] == occ / positions < 1
    assert [r["size"] for r in got["sizes"]] == [20, 200]
    text = CliRunner().invoke(
        cli, ["engram-audit", str(tmp_path / "t"), "--engram", str(tmp_path / "e.json")]
    )
    assert text.exit_code == 0 and "collided" in text.stdout and "coverage" in text.stdout

    fgram.build(tmp_path / "plain", [tmp_path / "shards"], max_len=3, engine="local")
    for table, config, says in (
        ("plain", cfg, "build --canonical"),
        ("t", dataclasses.replace(cfg, max_ngram_size=4, engram_vocab_size=[31, 37, 41]), "-K 4"),
    ):
        (tmp_path / "f.json").write_text(json.dumps(dataclasses.asdict(config)))
        run = CliRunner().invoke(
            cli, ["engram-audit", str(tmp_path / table), "--engram", str(tmp_path / "f.json")]
        )
        assert run.exit_code == 2 and says in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
