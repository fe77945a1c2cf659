"""`fgram.hf.scone_embeddings`: a Hugging Face causal LM reads its input rows from an
f-gram store, and `model(input_ids)` and `model.generate` run unchanged (KV cache,
greedy and sampled, batched with left padding). No download: tiny random models built
from a config, a store filled by `fgram embed` of a deterministic model. Skipped
without torch and transformers (optional extras)."""

import numpy as np
import pytest
from helpers import build, write_bin

torch = pytest.importorskip("torch", reason="torch is an optional extra")
transformers = pytest.importorskip("transformers", reason="transformers is an optional extra")

import fgram  # noqa: E402
from fgram.hf import SconeEmbedding, scone_embeddings  # noqa: E402

VOCAB, PAD = 48, 0
PHRASES = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 5, 6], [14, 15, 16, 17], [7, 8, 9]]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A K = 4 table of a corpus of repeated phrases, its index, rows of `hashed` (256)."""
    tmp = tmp_path_factory.mktemp("hfstore")
    rng = np.random.default_rng(0)
    docs = [
        [t for i in rng.integers(0, len(PHRASES), 12) for t in PHRASES[i]]
        + rng.integers(1, VOCAB, 5).tolist()
        for _ in range(40)
    ]
    path = write_bin(str(tmp / "c.bin"), docs, sep=PAD)
    build(None, [path], tmp / "t", max_len=4, min_count=2, doc_sep=PAD, engine="local")
    fgram.index(tmp / "t")
    fgram.embed(tmp / "t", model="fgram.pipeline.models:hashed", engine="local")
    return fgram.FgramStore.open(tmp / "t", mode="mmap")


def _model(kind):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=256, n_layer=2, n_head=4, n_positions=128
        )
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
        )
        model = transformers.LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = None  # never stop early: every row as long
    model.generation_config.pad_token_id = PAD
    return model.eval()


def _prompts():
    """Three prompts of different lengths, left-padded with PAD, and their mask."""
    prompts = [[5, 6, 7, 8, 9, 10], [12, 13, 5], [14, 15, 16, 17, 7, 8, 9, 10, 11]]
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), PAD)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return prompts, ids, mask


def _rows(store, tokens, mask, emb):
    """Input rows of padded sequences by hand: each real token's row from
    `FgramStore.step` over its own sequence (the token embedding where nothing matches),
    the token embedding at padding."""
    out = emb(tokens).clone()
    for b in range(len(tokens)):
        state = store.start(1)
        for t in range(tokens.shape[1]):
            if mask[b, t]:
                row, _, unmatched = store.step(state, [int(tokens[b, t])])
                if not unmatched[0]:
                    out[b, t] = torch.from_numpy(row[0].astype(np.float32))
    return out


FOLLOW = {a: b for p in PHRASES for a, b in zip(p, p[1:], strict=False)}


class Follow(transformers.LogitsProcessor):
    """Steers a random model along the corpus's phrases (a token with a successor in
    one is followed by it), so that what it generates continues f-grams."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        for b, last in enumerate(input_ids[:, -1].tolist()):
            if last in FOLLOW:
                scores[b, FOLLOW[last]] += 1000.0
        return scores


def _positions(mask):
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_greedy_generate_equals_a_hand_loop_of_store_steps(store, kind):
    """Batched, left-padded, KV-cached `generate` with the store module = a loop that
    steps the store a token at a time and runs the model's full forward on
    ``inputs_embeds``, token for token."""
    model = _model(kind)
    tok = model.get_input_embeddings()
    _, ids, mask = _prompts()
    seq, m = ids.clone(), mask.clone()
    with torch.no_grad():
        for _ in range(12):
            embeds = _rows(store, seq, m, tok)
            logits = model(inputs_embeds=embeds, attention_mask=m, position_ids=_positions(m))
            nxt = Follow()(seq, logits.logits[:, -1]).argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
            m = torch.cat([m, torch.ones_like(nxt)[:, None]], 1)
        kw = dict(max_new_tokens=12, do_sample=False, logits_processor=[Follow()])
        plain = model.generate(ids, attention_mask=mask, **kw)
        module = scone_embeddings(model, store)
        got = model.generate(ids, attention_mask=mask, **kw)
    assert isinstance(model.get_input_embeddings(), SconeEmbedding) and module.tokens is tok
    assert torch.equal(got, seq)
    assert not torch.equal(got, plain)  # the store changed what the model reads


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_every_row_a_generating_model_reads_is_the_stores(store, kind):
    """Sampled and greedy, with and without a cache: the rows the module gave at every
    position are those of each final sequence's own tokens; and `model(input_ids)`
    equals the model's forward on those rows."""
    model = _model(kind)
    tok = model.get_input_embeddings()
    module = scone_embeddings(model, store)
    seen = []
    module.register_forward_hook(lambda mod, args, out: seen.append(out.detach().clone()))
    _, ids, mask = _prompts()
    for sample, cache in ((True, True), (False, True), (True, False)):
        seen.clear()
        torch.manual_seed(1)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=10,
                do_sample=sample,
                top_k=0,
                use_cache=cache,
                logits_processor=[Follow()],
            )
        full = torch.cat([mask, torch.ones((len(ids), 10), dtype=torch.long)], 1)
        given = torch.cat(seen, 1) if cache else seen[-1]
        want = _rows(store, out, full, tok)[:, : given.shape[1]]
        real = full[:, : given.shape[1]] == 1
        assert given.shape[1] == ids.shape[1] + 9 and torch.equal(given[real], want[real])
        new = [store.embed_sequence(r[m == 1].numpy())[1][-10:] for r, m in zip(out, full)]
        assert max(x.max() for x in new) >= 3, out  # what it generated continued f-grams
    with torch.no_grad():
        a = model(ids, attention_mask=mask, position_ids=_positions(mask)).logits
        embeds = _rows(store, ids, mask, tok)
        b = model(inputs_embeds=embeds, attention_mask=mask, position_ids=_positions(mask)).logits
    assert torch.equal(a[mask == 1], b[mask == 1])


def test_a_store_of_another_width_is_refused(store):
    model = _model("gpt2")
    model.set_input_embeddings(torch.nn.Embedding(VOCAB, 64))
    with pytest.raises(ValueError, match="256 values, the model's embeddings 64"):
        scone_embeddings(model, store)


def test_ids_past_the_model_s_vocabulary_are_one_clear_error(store):
    """A store of a larger tokenizer than the model's embedding is refused when swapped in;
    ids past the embedding (another tokenizer's) say so, not torch's bare IndexError."""
    model = _model("gpt2")
    swapped = scone_embeddings(model, store)
    with pytest.raises(ValueError, match=f"token id {VOCAB + 3} is past the model's token"):
        model.generate(torch.tensor([[5, 6, VOCAB + 3]]), max_new_tokens=2, do_sample=False)
    wide = fgram.FgramStore(store.index, store.matrix, store.meta, vocab_size=VOCAB + 100)
    with pytest.raises(ValueError, match=f"tokenizer of {VOCAB + 100} token ids.*{VOCAB} rows"):
        scone_embeddings(_model("gpt2"), wide)
    assert isinstance(swapped, SconeEmbedding)
