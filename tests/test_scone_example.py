"""The plumbing a SCONE model rests on, end to end on a small generated corpus with a
numpy f-gram model (no torch): the tags a training loop reads, the store that inference
reads, and decoding a token at a time; then the example's own smoke run (with torch)."""

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import build
from hypothesis import given, settings
from hypothesis import strategies as st

import fgram
from fgram import FgramIndex, FgramStore, training_sequences
from fgram.pipeline.formats.synth import generate
from fgram.pipeline.models import hashed
from fgram.pipeline.tables.embed import to_stored

SEQ = 64
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "scone_tiny")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A table of a training corpus, its index and embeddings (a numpy model, float16),
    and the tags of a validation corpus of the same phrases (flat shards, separator 0)."""
    d = tmp_path_factory.mktemp("scone")
    generate(str(d / "train"), 120_000, vocab=400, seed=1, fmt="bin")
    generate(str(d / "val"), 20_000, vocab=400, seed=2, book_seed=1, fmt="bin")
    build(None, [d / "train"], d / "t", doc_sep=0, max_len=4, size=3000, engine="local")
    fgram.index(d / "t")
    fgram.embed(d / "t", "fgram.pipeline.models:hashed", engine="local", float="float16")
    fgram.annotate(d / "t", [d / "val"], d / "tags", doc_sep=0, engine="local")
    return d


def _windows(tags):
    return list(training_sequences(tags, seq_len=SEQ))


def _table_tokens(table) -> dict[int, list[int]]:
    loc, manifest = fgram.open_table(table)
    t = fgram.table_dataset(loc, manifest).to_table(columns=["fgram_id", "tokens"])
    return dict(zip(t.column("fgram_id").to_pylist(), t.column("tokens").to_pylist()))


def test_training_windows_carry_the_ids_that_match_gives(made):
    """Each window's f-gram ids and lengths are `FgramIndex.match` of its tokens alone
    (documents start after each separator; a separator gets id -1, length 0)."""
    index = FgramIndex.open(str(made / "t"))
    windows = _windows(made / "tags")
    assert len(windows) > 100
    matched = 0
    for tokens, fids, mlen in windows:
        sep = np.flatnonzero(tokens == 0)
        starts = np.union1d([0], sep + 1)
        want_f, want_m = index.match(tokens, doc_starts=starts[starts < len(tokens)])
        want_f[sep], want_m[sep] = -1, 0
        assert fids.tolist() == want_f.tolist() and mlen.tolist() == want_m.tolist()
        assert (mlen[: index.max_len - 1] <= np.arange(1, index.max_len)).all()  # in the window
        matched += int((fids >= 0).sum())
    assert matched > len(windows) * SEQ // 4


def test_store_rows_are_the_models_output_for_the_window_f_grams(made):
    """`FgramStore.embed_sequence` of a validation window: at every position the row of
    the window's own f-gram id (the tags'), which is the model's output for that
    f-gram's tokens, stored as float16; the token's own embedding where nothing matches."""
    store = FgramStore.open(str(made / "t"))
    tokens_of = _table_tokens(made / "t")
    model = hashed()
    for tokens, fids, mlen in _windows(made / "tags")[:20]:
        rows, lengths, unmatched = store.embed_sequence(tokens)
        assert unmatched.tolist() == (fids < 0).tolist()
        hit = np.flatnonzero(fids >= 0)
        assert (lengths[hit] == mlen[hit]).all()
        grams = [tokens_of[int(f)] for f in fids[hit]]
        assert all(g == tokens[i - len(g) + 1 : i + 1].tolist() for g, i in zip(grams, hit))
        padded = np.zeros((len(grams), 4), np.int32)
        for j, g in enumerate(grams):
            padded[j, : len(g)] = g
        want = to_stored(model(padded, np.array([len(g) for g in grams])), "float16")
        assert np.array_equal(rows[hit], want)
        assert not rows[unmatched].any()


def test_decoding_a_token_at_a_time_agrees_with_the_whole_sequence(made):
    """`FgramStore.step`, fed a window token by token (a batch of windows side by side),
    gives the rows and lengths `embed_sequence` gives the window at once."""
    store = FgramStore.open(str(made / "t"))
    windows = [w[0] for w in _windows(made / "tags")[:8]]
    batch = np.stack(windows)
    state = store.start(batch=len(batch))
    whole = [store.embed_sequence(w) for w in windows]
    for i in range(SEQ):
        rows, lengths, unmatched = store.step(state, batch[:, i])
        for b, (w_rows, w_len, w_un) in enumerate(whole):
            assert np.array_equal(rows[b], w_rows[i]) and lengths[b] == w_len[i]
            assert unmatched[b] == w_un[i]
    assert any((w[1] > 1).any() for w in whole)


def _example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLE, "run.py"), "--smoke",
         "--threads", "1", *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _example_module(name: str, monkeypatch):
    """One of the example's modules beside run.py (its helpers, without running it)."""
    monkeypatch.syspath_prepend(EXAMPLE)
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def scone_train():
    """The example's scone_train module (its imports beside it on the path)."""
    sys.path.insert(0, EXAMPLE)
    try:
        yield importlib.import_module("scone_train")
    finally:
        sys.path.remove(EXAMPLE)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 4),
    heads=st.integers(1, 3),
    shape=st.tuples(st.integers(1, 3), st.integers(1, 9)),
    seed=st.integers(0, 2**16),
    share=st.floats(0, 1),
)
def test_the_counted_engram_gives_counted_n_grams_their_own_rows(
    scone_train, n, heads, shape, seed, share
):
    """The counted Engram arm's rows (`scone_train.CountedRows`) against a brute-force
    oracle: a position's n-gram of each order (canonical ids, the pad before the window)
    among the counted ones has rows of its own, one per head after every bucket, in the
    given order; any other its bucket, Engram's hash id plus its table's offset."""
    from fgram.engram import EngramConfig, EngramHashing

    rng = np.random.default_rng(seed)
    vocab = 9
    lookup = rng.integers(0, 5, vocab)  # nine ids, five canonical ones
    cfg = EngramConfig(engram_vocab_size=[7] * (n - 1), max_ngram_size=n,
                       n_head_per_ngram=heads, layer_ids=[1], pad_id=0, seed=seed % 5)  # fmt: skip
    hashing = EngramHashing(cfg, lookup=(lookup, 5))
    tokens = rng.integers(0, vocab, shape)
    canon = np.concatenate([np.full((shape[0], n - 1), hashing.pad), lookup[tokens]], axis=1)
    exact = {}
    for m in range(2, n + 1):  # some of the windows' n-grams and some others
        seen = {
            tuple(canon[b, t + n - m : t + n]) for b in range(shape[0]) for t in range(shape[1])
        }
        other = {tuple(g) for g in rng.integers(0, 5, (4, m))}
        grams = sorted(g for g in seen | other if rng.random() < share)
        exact[m] = rng.permutation(np.array(grams, np.int64).reshape(-1, m))  # any order
    rows = scone_train.CountedRows(hashing, exact).rows(tokens)
    sizes = [p for order in hashing.table_sizes[1] for p in order]
    hashed, first = hashing.hash(tokens)[1], sum(sizes)
    for m in range(2, n + 1):
        own = {tuple(g): first + i * heads for i, g in enumerate(exact[m].tolist())}
        first += len(exact[m]) * heads
        for b in range(shape[0]):
            for t in range(shape[1]):
                gram = tuple(canon[b, t + n - m : t + n])
                for j in range(heads):
                    col = (m - 2) * heads + j
                    want = own[gram] + j if gram in own else hashed[b, t, col] + sum(sizes[:col])
                    assert rows[b, t, col] == want
    assert rows.max(initial=0) < first  # the table's rows: the buckets, then the counted


def test_the_example_smoke_run(tmp_path, monkeypatch):
    """examples/scone_tiny --smoke: every arm (baseline, baseline x2, SCONE, Engram,
    counted Engram) and seed on a tiny corpus. SCONE's validation loss from the store
    equals the training path's within float16 rounding of the rows; the arms' FLOPs,
    parameters and tables are as described; a finished run is kept as a record and not
    trained again; a run stopped after a checkpoint continues to the same result."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    out = _example("--jobs", "1", "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    res = json.load(open(tmp_path / "out" / "results.json"))
    assert set(res["models"]) == {"baseline", "baseline_x2", "scone", "engram", "engram_counted"}
    m = res["models"]
    assert all(len(row["ppl"]) == 3 for row in m.values())  # three seeds each
    scone = m["scone"]
    for ppl, store in zip(scone["ppl"], scone["store_ppl"], strict=True):
        assert store == pytest.approx(ppl, rel=2e-3)
    assert 0 < res["val_coverage"] <= 1 and res["val_mean_match_length"] > 1
    base, x2, engram = m["baseline"], m["baseline_x2"], m["engram"]
    assert base["inference_flops_per_token"] == scone["inference_flops_per_token"]
    assert x2["inference_flops_per_token"] > 1.5 * base["inference_flops_per_token"]
    assert base["params_main"] == scone["params_main"] and scone["params_fgram_model"] > 0
    assert engram["inference_flops_per_token"] > base["inference_flops_per_token"]
    # the tables' values (rows x width) alike: Engram's primes a little above SCONE's rows
    assert scone["values_off"] <= engram["values_off"] <= 1.1 * scone["values_off"]
    assert engram["ppl"] != base["ppl"]  # the module is in the network
    # the counted Engram: the same network and total of values, the counted n-grams' rows
    # its own (a full row each: one per head), the rest in buckets of the values left
    counted, setup = m["engram_counted"], res["engram"]["counted"]
    assert counted["inference_flops_per_token"] == engram["inference_flops_per_token"]
    assert counted["params_main"] == engram["params_main"]
    assert counted["values_off"] == setup["values"] and counted["rows_off"] == setup["rows"]
    # Engram's total, give or take the primes above each head's share (a few at this size)
    assert counted["values_off"] == pytest.approx(engram["values_off"], rel=0.05)
    own = sum(e["ngrams"] for e in setup["exact"].values())
    assert own > 0 and own * 4 < setup["rows"]  # --smoke: 4 heads
    assert own * 64 <= engram["values_off"]  # a full row (d = 64) each, within the total
    for order in setup["exact"].values():
        assert 0 < order["ngrams"] <= order["of"] and 0 < order["positions_share"] <= 1
    # the counted rows: every counted n-gram where the total holds them all (8 times the
    # memory), else the most frequent, in half of it (--smoke: the table is too large)
    train = _example_module("scone_train", monkeypatch)
    for memory in (1.0, 8.0):
        a = argparse.Namespace(smoke=True, max_len=3, seq_len=32, engram_heads=4,
                               engram_memory=memory)  # fmt: skip
        tok = str(tmp_path / "out" / "tokenizer" / "tokenizer.json")
        engram_of = train.engram_setup(a, tok, scone["rows_off"])
        c = train.counted_setup(a, str(tmp_path / "out"), engram_of)
        every = sum(e["of"] for e in c["exact"].values())
        own = sum(e["ngrams"] for e in c["exact"].values())
        if memory == 1.0:
            assert c["exact"] == setup["exact"] and own * 64 <= c["values"] // 2 < every * 64
        else:
            assert own == every and own * 64 < c["values"]
    assert counted["ppl"] != engram["ppl"]
    assert len(res["verdict"]) == 4 and os.path.exists(tmp_path / "out" / "loss.png")
    md = open(tmp_path / "out" / "results.md").read()
    assert "| Engram |" in md and "| counted Engram |" in md
    assert "The counted Engram's rows of their own" in md
    # the Engram arm's buckets audited on the training text's canonical n-grams: a share
    # per order 2..K, never less in one head than in every head at once
    audit = res["engram"]["audit"]
    assert sorted(audit) == ["2", "3"]  # --smoke: K = 3
    for order in audit.values():
        assert 0 < order["coverage"] <= 1
        assert order["collided_min"] <= order["collided_share"] <= order["collided_max"]
        assert 0 <= order["all_heads_share"] <= order["collided_min"] < 1
    assert "Engram's buckets (`fgram engram-audit`" in open(tmp_path / "out" / "results.md").read()
    # the audit is kept with the configuration it was made for, and made again for another
    from fgram.engram import EngramConfig

    data = _example_module("scone_data", monkeypatch)
    two = EngramConfig(**{**res["engram"]["config"], "n_head_per_ngram": 2})
    again = data.engram_audit(argparse.Namespace(max_len=3, smoke=True), str(tmp_path / "out"), two)
    kept = json.load(open(tmp_path / "out" / "engram_audit.json"))
    assert kept["config"]["n_head_per_ngram"] == 2 and kept["orders"] == again
    for n in audit:  # fewer heads: n-grams collided in all of them at least as often
        assert again[n]["all_heads_share"] >= audit[n]["all_heads_share"]
    # each finished run is one record; with the records, no run trains again (its run
    # folder gone), and a record of other settings is refused, naming the file
    records = tmp_path / "out" / "results"
    assert sorted(os.listdir(records)) == sorted(f"{k}-seed{s}.json" for k in m for s in range(3))
    shutil.rmtree(tmp_path / "out" / "runs")
    kept = _example("--kinds", "baseline,scone", "--out", str(tmp_path / "out"))
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert kept.stdout.count("from its record") == 6 and "step 0" not in kept.stdout
    again_m = json.load(open(tmp_path / "out" / "results.json"))["models"]
    assert again_m["scone"]["ppl"] == scone["ppl"] and again_m["baseline"] == base
    results = _example_module("scone_results", monkeypatch)
    kept_with = json.load(open(records / "baseline-seed0.json"))["config"]
    with pytest.raises(SystemExit) as refused:
        results.recorded(str(records), {**kept_with, "lr": 0.002}, "baseline", 0)
    want = f"{records / 'baseline-seed0.json'}: recorded with other settings (lr)"
    assert str(refused.value).startswith(want)
    # a record kept before a setting existed was made at its default: kept at it, refused
    # at another
    older = {k: v for k, v in kept_with.items() if k != "engram_memory"}
    rec = json.load(open(records / "baseline-seed0.json"))
    json.dump({**rec, "config": older}, open(records / "baseline-seed0.json", "w"))
    assert results.recorded(str(records), kept_with, "baseline", 0)["eval"] == rec["eval"]
    with pytest.raises(SystemExit, match=r"other settings \(engram_memory\)"):
        results.recorded(str(records), {**kept_with, "engram_memory": 0.5}, "baseline", 0)
    # two runs again side by side (their records and folders gone), each its own process
    # of one thread: the same records, bit for bit
    for run_of in ("scone-seed1", "baseline-seed2"):
        os.remove(records / f"{run_of}.json")
    lanes = _example("--jobs", "2", "--out", str(tmp_path / "out"))
    assert lanes.returncode == 0, lanes.stdout[-2000:] + lanes.stderr[-3000:]
    assert "2 runs, 2 side by side with 1 threads each" in lanes.stdout
    assert lanes.stdout.count("from its record") == 15
    assert "step 0" in open(tmp_path / "out" / "runs" / "scone-seed1.log").read()
    lanes_m = json.load(open(tmp_path / "out" / "results.json"))["models"]
    assert lanes_m["scone"]["ppl"] == scone["ppl"] and lanes_m["baseline"]["ppl"] == base["ppl"]
    # the Engram run of seed 0 again (its data kept, its record gone), stopped after its
    # checkpoint at step 8 of 12, then run once more: it continues there, to the same model
    os.remove(records / "engram-seed0.json")
    one = ("--kinds", "engram", "--seeds", "0", "--out", str(tmp_path / "out"))
    stopped = _example(*one, "--stop-at", "8")
    assert stopped.returncode != 0 and "stopped at step 8" in stopped.stderr
    again = _example(*one)
    assert again.returncode == 0 and "continues at step 8" in again.stdout, again.stderr
    resumed = json.load(open(tmp_path / "out" / "results.json"))["models"]["engram"]
    assert resumed["ppl"][0] == engram["ppl"][0]  # one thread both times: bit for bit


def test_the_example_runs_fgram_as_a_module_where_no_command_is_beside_python(
    tmp_path, monkeypatch
):
    """A Python that imports fgram from a checkout (PYTHONPATH) has no `fgram` command
    beside it: the example then runs ``python -m fgram``. Here: this environment's own
    packages seen through a Python in a folder that holds no `fgram`."""
    env = os.path.dirname(os.path.dirname(sys.executable))
    if sys.prefix == sys.base_prefix or not os.path.exists(os.path.join(env, "pyvenv.cfg")):
        pytest.skip("needs a virtual environment to mirror without its commands")
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    (bare / "bin" / "python").symlink_to(sys.executable)
    shutil.copy(os.path.join(env, "pyvenv.cfg"), bare / "pyvenv.cfg")
    (bare / "lib").symlink_to(os.path.join(env, "lib"))
    data = _example_module("scone_data", monkeypatch)
    monkeypatch.setattr(sys, "executable", str(bare / "bin" / "python"))
    assert not (bare / "bin" / "fgram").exists()
    assert data.fgram("--version").startswith("fgram, version ")
