"""SCONE generation with Hugging Face ``transformers`` (``pip install 'fgram[hf]'``).

    from transformers import AutoModelForCausalLM
    import fgram
    from fgram.hf import scone_embeddings

    model = AutoModelForCausalLM.from_pretrained("...")
    scone_embeddings(model, fgram.FgramStore.open("TABLE", mode="mmap"))
    out = model.generate(input_ids, attention_mask=mask, max_new_tokens=64)

`scone_embeddings` replaces the model's input embedding module with a `SconeEmbedding`:
every position's input row is the stored row of the longest f-gram ending there (the
model's own token embedding where none matches), exactly as `FgramStore.embed_sequence`
gives it for the sequence's tokens. It keeps each sequence's last K-1 tokens, so that a
KV-cached `generate` (which passes only the new token) gets the same rows as a full
forward of the whole sequence; a forward from the start (no cache, or a cache of
length 0) starts afresh. Padding (``attention_mask`` zeros, left or right) is no
context: a match never reaches into it, and a padded position gets the token
embedding. The store lives on the CPU (memory-mapped or in RAM); its rows are moved to
the embedding's device and dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fgram.pipeline.tables.embed import FgramStore


class SconeEmbedding(nn.Module):
    """Input rows from an `FgramStore` where an f-gram matches, else from ``tokens`` (the
    model's token embedding, kept as the module's ``weight`` for tying)."""

    def __init__(self, tokens: nn.Embedding, store: FgramStore) -> None:
        super().__init__()
        if store.dim != tokens.embedding_dim:
            raise ValueError(
                f"the store's rows have {store.dim} values, the model's embeddings "
                f"{tokens.embedding_dim}"
            )
        if store.vocab_size is not None and store.vocab_size > tokens.num_embeddings:
            raise ValueError(
                f"the store's table is of a tokenizer of {store.vocab_size} token ids, the "
                f"model's token embedding has {tokens.num_embeddings} rows: use a model of "
                f"the table's tokenizer (vocab_size >= {store.vocab_size})"
            )
        self.tokens, self.store = tokens, store
        self.context = store.max_len - 1  # tokens a match may reach back
        self.tails: list[np.ndarray] | None = None  # each sequence's last real tokens
        self.call: dict[str, Any] = {}  # the coming forward's mask and past length

    @property
    def weight(self) -> torch.Tensor:
        return self.tokens.weight

    @property
    def num_embeddings(self) -> int:
        return self.tokens.num_embeddings

    @property
    def embedding_dim(self) -> int:
        return self.tokens.embedding_dim

    def forward(
        self,
        input_ids: torch.Tensor,
        past: int | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Rows of ``input_ids`` [B, T]; ``past``: how many positions of each sequence came
        before (0: a new batch of sequences; by default what the model's forward was
        given, else 0); ``attention_mask`` [B, past + T] (default: the model's, else
        all ones)."""
        if input_ids.numel() and int(input_ids.max()) >= self.tokens.num_embeddings:
            raise ValueError(
                f"token id {int(input_ids.max())} is past the model's token embedding "
                f"({self.tokens.num_embeddings} rows): ids of another tokenizer?"
            )
        emb = self.tokens(input_ids)
        ids = input_ids.detach().cpu().numpy().astype(np.int64).reshape(len(input_ids), -1)
        b, t = ids.shape
        mask, given = self.call.pop("mask", None), self.call.pop("past", 0)
        if attention_mask is not None:
            mask = attention_mask.detach().cpu().numpy()
        past = given if past is None else past
        real = np.ones((b, t), bool) if mask is None else mask[:, -t:].astype(bool)
        if past == 0 or self.tails is None or len(self.tails) != b:
            self.tails = [np.zeros(0, np.int64)] * b  # a forward from the start
        flat, starts, at = [], [], 0
        for row in range(b):  # a sequence at a time (the batch), never a token at a time
            ctx = np.concatenate([self.tails[row], ids[row][real[row]]])
            starts.append(at)
            flat.append(ctx)
            at += len(ctx)
            self.tails[row] = ctx[len(ctx) - self.context :] if self.context else ctx[:0]
        tokens = np.concatenate(flat) if flat else np.zeros(0, np.int64)
        ends = np.asarray(starts, np.int64) + np.asarray([len(f) for f in flat], np.int64)
        new = real.sum(1)  # each sequence's new real positions: its context's last ones
        keep = np.concatenate([np.arange(e - n, e) for e, n in zip(ends, new, strict=True)])
        if not len(keep):
            return emb
        fid = self.store.index.match(tokens, doc_starts=starts)[0][keep]
        hit = fid >= 0  # `FgramStore.embed_sequence`'s rows: none where nothing matches
        if not hit.any():
            return emb
        use = np.zeros((b, t), bool)
        use[real] = hit  # the real positions in order, as ``keep`` lists them
        rows = np.ascontiguousarray(self.store.rows(fid[hit]), np.float32)
        out = emb.clone()
        out[torch.from_numpy(use).to(emb.device)] = torch.from_numpy(rows).to(
            device=emb.device, dtype=emb.dtype
        )
        return out


def _before_forward(module: Any, args: tuple, kwargs: dict) -> None:
    """The model's forward is about to run (``module``: a transformers model): tell its
    SconeEmbedding the attention mask and how many positions the cache holds (0: a
    forward from the start)."""
    emb = module.get_input_embeddings()
    if not isinstance(emb, SconeEmbedding):
        return
    mask = kwargs.get("attention_mask")
    emb.call = {"mask": None if mask is None else mask.detach().cpu().numpy()}
    position = kwargs.get("cache_position")
    cache = kwargs.get("past_key_values")  # transformers 4; 5 names it ``cache``
    cache = cache if cache is not None else kwargs.get("cache")
    if position is not None and len(position):
        emb.call["past"] = int(position[0])
    elif cache is not None and hasattr(cache, "get_seq_length"):
        emb.call["past"] = int(cache.get_seq_length())
    elif cache is not None:  # the legacy tuple of (key, value) per layer
        emb.call["past"] = int(cache[0][0].shape[-2])
    else:
        emb.call["past"] = 0


def scone_embeddings(model: Any, store: FgramStore) -> SconeEmbedding:
    """Make ``model`` (a ``transformers`` causal LM, or any module with
    ``get_input_embeddings``/``set_input_embeddings``) read its input rows from
    ``store``; returns the new module. ``model(input_ids)`` and ``model.generate``
    then run unchanged."""
    current = model.get_input_embeddings()
    tokens = current.tokens if isinstance(current, SconeEmbedding) else current
    module = SconeEmbedding(tokens, store)
    model.set_input_embeddings(module)
    if not getattr(model, "_fgram_hooked", False):
        model.register_forward_pre_hook(_before_forward, with_kwargs=True)
        model._fgram_hooked = True
    return module
