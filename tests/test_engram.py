"""fgram.engram against references restated here from Engram's description (the public
demo's data side, ../shared/ENGRAM.md): hash ids bit-exact over drawn configurations and
id arrays, the prime table sizes, and canonical token ids over tokenizers trained here
(byte-level BPE; accents, case, whitespace and byte-fallback tokens)."""

import importlib.util
import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fgram.engram import EngramConfig, EngramHashing, canonical_map, table_sizes


def _prime(n: int) -> bool:
    return n > 1 and all(n % f for f in range(2, int(n**0.5) + 1))


def reference_sizes(cfg: EngramConfig) -> dict:
    """Per layer, order and head: the next prime above the start not used yet."""
    used, out = set(), {}
    for layer in cfg.layer_ids:
        out[layer] = []
        for n in range(2, cfg.max_ngram_size + 1):
            start, heads = cfg.engram_vocab_size[n - 2] - 1, []
            for _ in range(cfg.n_head_per_ngram):
                c = start + 1
                while not (_prime(c) and c not in used):
                    c += 1
                used.add(c)
                heads.append(c)
                start = c
            out[layer].append(heads)
    return out


def reference_hash(cfg: EngramConfig, lookup: np.ndarray, size: int, ids) -> dict:
    """The description, step by step, in numpy's int64 (wrapping) arithmetic."""
    x = np.asarray(ids).astype(np.int64)
    x = np.where(x >= 0, lookup[np.maximum(x, 0)], x)
    pad = int(lookup[cfg.pad_id])
    half = max(1, int(np.iinfo(np.int64).max // size) // 2)
    sizes = reference_sizes(cfg)
    b, t = x.shape
    out = {}
    for layer in cfg.layer_ids:
        g = np.random.default_rng(cfg.seed + 10007 * layer)
        m = g.integers(0, half, size=cfg.max_ngram_size, dtype=np.int64) * 2 + 1
        back = [np.concatenate([np.full((b, k), pad, np.int64), x[:, : t - k]], 1)[:, :t]
                for k in range(cfg.max_ngram_size)]  # fmt: skip
        cols = []
        with np.errstate(over="ignore"):
            for n in range(2, cfg.max_ngram_size + 1):
                mix = back[0] * m[0]
                for k in range(1, n):
                    mix = mix ^ (back[k] * m[k])
                cols += [np.mod(mix, p) for p in sizes[layer][n - 2]]
        out[layer] = np.stack(cols, 2) if t else np.zeros((b, 0, len(cols)), np.int64)
    return out


configs = st.builds(
    lambda sizes, max_n, heads, layers, pad, seed: EngramConfig(
        engram_vocab_size=sizes[: max_n - 1], max_ngram_size=max_n, n_head_per_ngram=heads,
        layer_ids=layers, pad_id=pad, seed=seed,
    ),
    sizes=st.lists(st.integers(2, 5000) | st.integers(4000, 3_000_000), min_size=3, max_size=3),
    max_n=st.integers(2, 4),
    heads=st.integers(1, 8),
    layers=st.lists(st.integers(0, 40), min_size=1, max_size=3, unique=True),
    pad=st.integers(0, 9),
    seed=st.integers(0, 2**20),
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cfg=configs,
    vocab=st.integers(10, 70000),
    groups=st.integers(1, 400),
    shape=st.tuples(st.integers(1, 4), st.integers(0, 40) | st.integers(250, 600)),
    dtype=st.sampled_from([np.uint16, np.int32, np.int64]),
    seed=st.integers(0, 1000),
    padded=st.sampled_from([0, -1, -100, -(2**31)]),
)
def test_hash_ids_are_the_reference_s_bit_for_bit(cfg, vocab, groups, shape, dtype, seed, padded):
    rng = np.random.default_rng(seed)
    groups = min(groups, vocab)
    lookup = rng.integers(0, groups, vocab).astype(np.int64)  # many ids share a canonical
    size = int(lookup.max()) + 1
    top = min(vocab, np.iinfo(dtype).max + 1)
    ids = rng.integers(0, top, shape).astype(dtype)
    if padded and dtype != np.uint16 and ids.size:  # a loader's padding: kept as it is
        ids.reshape(-1)[::3] = padded
    got = EngramHashing(cfg, lookup=(lookup, size)).hash(ids)
    want = reference_hash(cfg, lookup, size, ids)
    assert got.keys() == want.keys()
    for layer in want:
        assert got[layer].dtype == np.int64 and np.array_equal(got[layer], want[layer])


def test_the_demo_configuration_s_table_sizes_and_file():
    """The demo's defaults (129280 x 5 per order, 8 heads, layers 1 and 15): every table
    size a distinct prime, each the next one up, layer 15's above layer 1's; a TOML or
    JSON file with the demo's names (and others it ignores) gives the same config."""
    cfg = EngramConfig()
    sizes = table_sizes(cfg)
    assert sizes == reference_sizes(cfg)
    flat = [p for layer in cfg.layer_ids for order in sizes[layer] for p in order]
    assert len(set(flat)) == len(flat) == 2 * 2 * 8 and all(_prime(p) for p in flat)
    assert min(sizes[15][0]) > max(sizes[1][1]) > 129280 * 5
    if importlib.util.find_spec("sympy"):
        from sympy import nextprime

        assert sizes[1][0][0] == nextprime(129280 * 5 - 1)


def test_a_config_file_by_the_demo_s_names(tmp_path):
    doc = {"engram_vocab_size": [1000, 2000], "max_ngram_size": 3, "n_head_per_ngram": 2,
           "layer_ids": [2], "pad_id": 1, "seed": 7, "n_embed_per_ngram": 512}  # fmt: skip
    (tmp_path / "e.json").write_text(json.dumps(doc))
    (tmp_path / "e.toml").write_text(
        "[engram]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in doc.items())
    )
    a, b = EngramConfig.load(str(tmp_path / "e.json")), EngramConfig.load(str(tmp_path / "e.toml"))
    assert a == b and a.layer_ids == [2] and a.engram_vocab_size == [1000, 2000]


def _tokenizer(tmp_path):
    """A byte-level BPE (GPT-2 style) with accented, cased and whitespace-only tokens, and
    its folder for transformers (tokenizer_config.json beside it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [
        "Café café CAFÉ naïve NAÏVE  \t\n  Über über ÜBER",
        "Ǆ ǅ ǆ ﬁ ＡＢＣ ①",
        "日本語 😀 👍🏽",
    ] * 50
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(text, trainer)
    return _folder(tok, tmp_path / "tok", "<|endoftext|>")


def _folder(tok, folder, eos: str):
    """A trained tokenizer's folder as transformers reads it: tokenizer.json and a
    tokenizer_config.json naming its end of text."""
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos})
    )
    return folder


def _byte_fallback_tokenizer(tmp_path):
    """A Llama-style BPE: a metaspace pre-tokenizer and byte-fallback tokens <0x00>..<0xFF>
    for what its vocabulary lacks, decoded byte by byte (a lone byte of a multi-byte
    character decodes to U+FFFD)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0),
    ])  # fmt: skip
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>", "</s>", *bytes_], show_progress=False
    )
    text = ["Café café CAFÉ naïve NAÏVE Über über ÜBER   spaced  out", "Ǆ ǅ ǆ ﬁ ＡＢＣ ①"] * 50
    tok.train_from_iterator(text, trainer)
    return _folder(tok, tmp_path / "llama", "</s>")


def reference_map(folder) -> tuple[np.ndarray, int]:
    """The description's canonical ids: transformers' decode of each id alone, tokenizers'
    normalizers in the order given, U+FFFD keyed by the token's string."""
    from tokenizers import Regex, normalizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    steps = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
    ])  # fmt: skip
    keys: dict = {}
    out = []
    for i in range(len(tok)):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.convert_ids_to_tokens(i)
        else:
            s = steps.normalize_str(text)
            s = s if s == " " else normalizers.Strip().normalize_str(s)
            key = s or text
        out.append(keys.setdefault(key, len(keys)))
    return np.asarray(out, np.int64), len(keys)


@pytest.mark.parametrize("make", [_tokenizer, _byte_fallback_tokenizer])
def test_canonical_ids_are_the_reference_s(tmp_path, make):
    """A GPT-2-style byte-level BPE and a Llama-style byte-fallback one: the map equals
    the description's, case and accents fold ids together, and tokens whose text alone is
    a partial character (U+FFFD) keep ids of their own."""
    pytest.importorskip("transformers", reason="transformers is an optional extra")
    from transformers import AutoTokenizer

    folder = make(tmp_path)
    lookup, size = canonical_map(str(folder))
    want, want_size = reference_map(folder)
    assert size == want_size and np.array_equal(lookup, want)
    assert size < len(lookup)  # case and accents folded: Café, café and CAFÉ share one
    again, _ = canonical_map(str(folder / "tokenizer.json"))  # the file alone: the same
    assert np.array_equal(again, lookup)
    tok = AutoTokenizer.from_pretrained(str(folder))
    partial = [i for i in range(len(tok)) if "\ufffd" in tok.decode([i])]
    assert partial and len({int(lookup[i]) for i in partial}) == len(partial)


def test_hashing_from_a_tokenizer_maps_its_ids_first(tmp_path):
    pytest.importorskip("transformers", reason="transformers is an optional extra")
    folder = _tokenizer(tmp_path)
    lookup, size = canonical_map(str(folder))
    cfg = EngramConfig(engram_vocab_size=[500, 700], max_ngram_size=3, n_head_per_ngram=4,
                       layer_ids=[1], pad_id=1)  # fmt: skip
    ids = np.random.default_rng(0).integers(0, len(lookup), (3, 50))
    got = EngramHashing(cfg, str(folder)).hash(ids)
    assert np.array_equal(got[1], reference_hash(cfg, lookup, size, ids)[1])
    with pytest.raises(Exception, match="past the tokenizer's"):
        EngramHashing(cfg, lookup=(lookup, size)).hash([[len(lookup)]])


def test_a_canonical_build_counts_the_mapped_tokens_exactly(tmp_path):
    """build --canonical over `fgram tokenize` shards: the table of the documents' tokens
    mapped to canonical ids (a brute-force count), its manifest naming the map; show gives
    each canonical n-gram as the text of its ids' first tokens. With --canonical, lookup
    and coverage match the tokens' canonical ids (each position's longest f-gram by brute
    force over the table's rows), annotate tags them and refresh counts them as build
    does; without it, or tokens under another map, or a plain table, are refused."""
    from helpers import result
    from oracle import select, split_flat

    import fgram
    from fgram.pipeline.errors import ConfigError

    folder = _tokenizer(tmp_path)
    words = ["Café", "café", "CAFÉ", "naïve", "NAÏVE", "Über", "über", "ÜBER", "ﬁ", "①"]
    rng = np.random.default_rng(3)
    lines = [json.dumps({"text": " ".join(rng.choice(words, 12))}) for _ in range(150)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    tok = str(folder / "tokenizer.json")
    fgram.tokenize([tmp_path / "a.jsonl"], tmp_path / "shards", tok, format="bin", engine="local")
    m = fgram.build(tmp_path / "t", [tmp_path / "shards"], canonical=True, min_count=3,
                    max_len=4, engine="local")  # fmt: skip
    lookup, size = canonical_map(tok)
    assert m["canonical"]["size"] == size < len(lookup)
    shards = json.load(open(tmp_path / "shards" / "manifest.json"))
    flat = np.concatenate(
        [np.fromfile(tmp_path / "shards" / s["name"], np.uint16) for s in shards["shards"]]
    )
    docs = [[int(lookup[t]) for t in d] for d in split_flat(flat.tolist(), shards["doc_sep"])]
    assert result(tmp_path / "t") == select(docs, 4, 3, None)
    mapped = {tuple(g) for g, _ in result(tmp_path / "t")}
    assert any(len({lookup[t] for t in d}) < len(set(d)) for d in split_flat(flat.tolist(), 0))
    assert mapped  # (Café and café: one canonical id, one n-gram's count)
    top = fgram.show(tmp_path / "t", top=5)["top_fgrams"]
    first = np.unique(lookup, return_index=True)[1]
    from tokenizers import Tokenizer

    decode = Tokenizer.from_file(tok).decode
    assert [r["text"] for r in top] == [decode([int(first[t]) for t in r["tokens"]]) for r in top]
    fgram.index(tmp_path / "t")
    rows = {tuple(g): i for i, (g, _) in enumerate(result(tmp_path / "t"))}
    raw = split_flat(flat.tolist(), shards["doc_sep"])
    hist = [0] * 5
    for doc, mapped_doc in zip(raw, docs, strict=True):
        want_ids, want_len = [], []
        for i in range(len(doc)):  # the longest f-gram ending at i, by brute force
            length = max([n for n in range(2, 5) if i + 1 >= n
                          and tuple(mapped_doc[i + 1 - n : i + 1]) in rows] or [1])  # fmt: skip
            want_len.append(length)
            want_ids.append(rows[tuple(mapped_doc[i + 1 - length : i + 1])] if length > 1 else -1)
            hist[length] += 1
        if doc:
            got = fgram.lookup(tmp_path / "t", tokens=doc, canonical=True)
            assert got["match_len"].tolist() == want_len
            assert got["fgram_ids"].tolist() == want_ids
    cov = fgram.coverage(tmp_path / "t", [tmp_path / "shards"], canonical=True, engine="local")
    assert cov["matched_by_length"] == {str(n): hist[n] for n in (2, 3, 4)}
    assert cov["unmatched"] == hist[1] and sum(hist[2:]) > 0
    tags = fgram.annotate(tmp_path / "t", [tmp_path / "shards"], tmp_path / "tags",
                          canonical=True, engine="local")  # fmt: skip
    assert tags["table"]["canonical"]["sha256"] == m["canonical"]["sha256"]
    assert tags["coverage"]["matched_by_length"] == cov["matched_by_length"]
    r = fgram.refresh(tmp_path / "r", [tmp_path / "shards"], canonical=True, min_count=3,
                      max_len=4, engine="local")  # fmt: skip
    assert result(tmp_path / "r" / "current") == result(tmp_path / "t")
    assert r["manifest"]["canonical"]["sha256"] == m["canonical"]["sha256"]
    fgram.build(tmp_path / "plain", [tmp_path / "shards"], min_count=3, engine="local")
    fgram.index(tmp_path / "plain")
    other = tmp_path / "other"  # the same table, its map recorded as another's
    shutil.copytree(tmp_path / "t", other)
    doc = json.load(open(other / "manifest.json"))
    doc["canonical"]["sha256"] = "0" * 64
    json.dump(doc, open(other / "manifest.json", "w"))
    fgram.index(other, overwrite=True)  # of the manifest as it now reads
    for refused, says in (
        (lambda: fgram.lookup(tmp_path / "t", tokens=[1, 2, 3]), "with --canonical"),
        (lambda: fgram.coverage(tmp_path / "t", [tmp_path / "shards"]), "with --canonical"),
        (lambda: fgram.lookup(tmp_path / "plain", tokens=[1, 2], canonical=True), "without"),
        (lambda: fgram.lookup(other, tokens=[1, 2], canonical=True), "another map"),
        (
            lambda: fgram.annotate(
                other, [tmp_path / "shards"], tmp_path / "tags2", canonical=True
            ),
            "another map",
        ),  # fmt: skip
    ):
        with pytest.raises(ConfigError, match=says):
            refused()
