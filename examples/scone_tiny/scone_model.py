"""The models of the example: a small GPT (the baseline, and a deeper one of about twice
its inference FLOPs), the same GPT fed by an f-gram model where a position has an f-gram
(SCONE), the same GPT with an Engram module (hashed n-gram embeddings; counted: exact rows
for the frequent ones), and the factory `fgram embed` calls to precompute the f-gram
model's rows.

- `GPT`: token and learned position embeddings, pre-norm blocks (causal attention, a
  GELU MLP), the output layer tied to the token embeddings. `logits(inputs)` takes the
  input embeddings, so both models share it; a KV cache decodes a token at a time.
- `FgramModel`: a small causal transformer over the *main model's* token embeddings of
  an f-gram's tokens, plus positions up to K; the f-gram's embedding is its output at
  the last token. Right padding needs no mask: a causal position never sees past itself.
- `Scone`: the GPT, its input at a matched position the f-gram model's output for the
  position's longest f-gram (replacing the token embedding, as in the paper), computed
  once per distinct f-gram of the batch; elsewhere the token embedding. At inference
  the rows come from `fgram.FgramStore` instead, so the f-gram model is not run.
- `EngramGPT`: the GPT with an Engram module added to the residual stream before one
  block, built as DeepSeek's public demo describes it (restated, not copied): per order
  2..N and head, a bucket of the canonical n-gram ending at each position
  (`fgram.engram.EngramHashing`, exact to the demo's hash) indexes one table of
  ``n_embed / heads`` wide rows; the concatenated rows give a key and a value; a gate,
  the signed square root of the key's and the hidden state's scaled dot product (each
  RMS-normalised) through a sigmoid, scales the value; a causal depthwise convolution
  (kernel 4, dilation N, RMS-normalised input, SiLU) of the gated value is added to it.
  The demo's hyper-connections (4 streams) are left out: the GPT has one stream. The
  counted Engram is the same module whose table also holds rows of their own for the
  n-grams fgram counted (``engram_exact`` of them, a row per head each, after the
  buckets): its rows come from `scone_train.CountedRows`.
- `fgram_model()`: ``fgram embed TABLE --model scone_model:fgram_model`` with
  ``SCONE_TINY_CHECKPOINT`` naming a trained `Scone` checkpoint.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    vocab: int
    seq_len: int = 256
    layers: int = 4
    dim: int = 256
    heads: int = 4
    fgram_layers: int = 2  # the f-gram model's blocks (SCONE only)
    max_len: int = 4  # K: the longest f-gram
    # Engram only: the block it comes before, its table sizes (a prime per order and
    # head, orders in turn), heads per order, the concatenated width per order, the
    # longest n-gram (N), the convolution's kernel
    engram_layer: int = 1
    engram_sizes: tuple[int, ...] = ()
    engram_heads: int = 4
    engram_dim: int = 256
    engram_max_n: int = 4
    engram_kernel: int = 4
    # the counted Engram only: n-grams with exact rows of their own (a row per head each,
    # after the buckets)
    engram_exact: int = 0


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [b, heads, t, d/heads]
        if cache is not None:  # decoding: the new positions attend to all before them
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        causal = cache is None or t > 1
        if causal and k.shape[2] != t:
            raise ValueError("a cache takes one position at a time after the prompt")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.apply(_init)

    def logits(
        self,
        inputs: torch.Tensor,
        start: int = 0,
        caches: list[dict] | None = None,
        before: dict | None = None,
    ) -> torch.Tensor:
        """Next-token logits from input embeddings [b, t, d] at positions start..;
        ``before``: {block index: a function of the hidden states added before it}."""
        pos = torch.arange(start, start + inputs.shape[1], device=inputs.device)
        x = inputs + self.pos(pos)[None]
        for i, block in enumerate(self.blocks):
            if before and i in before:
                x = x + before[i](x)
            x = block(x, None if caches is None else caches[i])
        return self.ln(x) @ self.tok.weight.T

    def inputs(self, tokens: torch.Tensor, *_: object) -> torch.Tensor:
        return self.tok(tokens)

    def forward(self, tokens: torch.Tensor, *_: object) -> torch.Tensor:
        return self.logits(self.inputs(tokens))

    def flops_per_token(self) -> int:
        return self.flops_of(self.cfg)

    @staticmethod
    def flops_of(cfg: Config) -> int:
        """Multiply-adds x 2 of one token's forward pass at full context: the
        matrices of every block and the output layer, and attention over seq_len."""
        d, t = cfg.dim, cfg.seq_len
        per_block = 2 * (3 * d * d + d * d + 8 * d * d) + 2 * 2 * t * d
        return cfg.layers * per_block + 2 * d * cfg.vocab


class FgramModel(nn.Module):
    """(tokens int [n, K] right-padded, lengths [n]) -> [n, d]."""

    def __init__(self, tok: nn.Embedding, cfg: Config):
        super().__init__()
        self.tok = tok  # the main model's token embeddings, shared and trained with it
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads) for _ in range(cfg.fgram_layers))
        self.ln = nn.LayerNorm(cfg.dim)
        for m in (self.pos, self.blocks, self.ln):
            m.apply(_init)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        tokens = tokens.long()
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))[None]
        for block in self.blocks:
            x = block(x)
        last = (lengths.long() - 1).clamp(min=0)
        return self.ln(x[torch.arange(len(tokens), device=tokens.device), last])


class Scone(GPT):
    """The GPT whose input at a matched position is its f-gram's embedding."""

    def __init__(self, cfg: Config, fgram_tokens: torch.Tensor, fgram_lengths: torch.Tensor):
        super().__init__(cfg)
        self.fgram = FgramModel(self.tok, cfg)
        # every f-gram's tokens [S, K] and length [S], by fgram_id (not trained, not saved)
        self.register_buffer("fgram_tokens", fgram_tokens, persistent=False)
        self.register_buffer("fgram_lengths", fgram_lengths, persistent=False)

    def inputs(self, tokens: torch.Tensor, fgram_ids: torch.Tensor) -> torch.Tensor:
        emb = self.tok(tokens)
        hit = fgram_ids >= 0
        if not hit.any():
            return emb
        ids, where = torch.unique(fgram_ids[hit], return_inverse=True)
        rows = self.fgram(self.fgram_tokens[ids], self.fgram_lengths[ids])
        return emb.masked_scatter(hit[..., None], rows[where])

    def forward(self, tokens: torch.Tensor, fgram_ids: torch.Tensor) -> torch.Tensor:
        return self.logits(self.inputs(tokens, fgram_ids))


class ShortConv(nn.Module):
    """A causal depthwise convolution over time of RMS-normalised states, then SiLU."""

    def __init__(self, dim: int, kernel: int, dilation: int):
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.conv = nn.Conv1d(dim, dim, kernel, groups=dim, bias=False,
                              padding=(kernel - 1) * dilation, dilation=dilation)  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        y = self.conv(self.norm(x).transpose(1, 2))[..., :t]
        return F.silu(y).transpose(1, 2)


class Engram(nn.Module):
    """(hidden states [b, t, d], rows of the table [b, t, (N-1) * heads]) -> [b, t, d]."""

    def __init__(self, cfg: Config):
        super().__init__()
        sizes = list(cfg.engram_sizes)
        self.register_buffer("offsets", torch.tensor([0, *sizes[:-1]]).cumsum(0), persistent=False)
        width = cfg.engram_dim // cfg.engram_heads  # a head's row
        rows = sum(sizes) + cfg.engram_exact * cfg.engram_heads
        self.table = nn.Embedding(rows, width, sparse=True)  # held off the accelerator
        concat = (cfg.engram_max_n - 1) * cfg.engram_dim
        self.key = nn.Linear(concat, cfg.dim)
        self.value = nn.Linear(concat, cfg.dim)
        self.key_norm, self.query_norm = nn.RMSNorm(cfg.dim), nn.RMSNorm(cfg.dim)
        self.conv = ShortConv(cfg.dim, cfg.engram_kernel, cfg.engram_max_n)
        self.dim = cfg.dim

    def forward(self, h: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        e = self.table(rows).flatten(-2)  # the heads' rows, side by side
        dot = (self.key_norm(self.key(e)) * self.query_norm(h)).sum(-1, keepdim=True)
        dot = dot / math.sqrt(self.dim)
        gate = torch.sigmoid(dot.sign() * dot.abs().clamp_min(1e-6).sqrt())
        v = gate * self.value(e)
        return v + self.conv(v)

    def flops_per_token(self) -> int:
        """The projections' multiply-adds x 2, the gate's dot product, the convolution."""
        concat = self.key.in_features
        return (
            2 * 2 * concat * self.dim + 2 * self.dim + 2 * self.dim * self.conv.conv.kernel_size[0]
        )


class EngramGPT(GPT):
    """The GPT with an Engram module before block ``cfg.engram_layer``; ``hashing``
    (`fgram.engram.EngramHashing` of a configuration of one layer) gives the hash ids of
    the tokens of each window (the window as the demo's sequence), each the bucket of its
    order's and head's table; or, for the counted Engram, an object whose ``rows(tokens)``
    gives the rows of the whole table (`scone_train.CountedRows`)."""

    def __init__(self, cfg: Config, hashing=None):
        super().__init__(cfg)
        self.engram = Engram(cfg)
        for m in (self.engram.key, self.engram.value, self.engram.table):
            _init(m)
        self.hashing = hashing

    def hash_ids(self, tokens: torch.Tensor) -> torch.Tensor:
        """The table's rows of each position's n-grams, orders and heads in turn."""
        x = tokens.cpu().numpy()
        if hasattr(self.hashing, "rows"):  # the counted Engram
            return torch.from_numpy(self.hashing.rows(x)).to(tokens.device)
        (layer,) = self.hashing.config.layer_ids  # the configuration's one layer
        ids = torch.from_numpy(self.hashing.hash(x)[layer]).to(tokens.device)
        return ids + self.engram.offsets  # a bucket of each head's table

    def forward(self, tokens: torch.Tensor, *_: object) -> torch.Tensor:
        ids = self.hash_ids(tokens)
        return self.logits(
            self.tok(tokens), before={self.cfg.engram_layer: lambda x: self.engram(x, ids)}
        )

    def flops_per_token(self) -> int:
        return super().flops_per_token() + self.engram.flops_per_token()


def _init(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def save(model: GPT, path: str) -> None:
    torch.save({"config": asdict(model.cfg), "state": model.state_dict()}, path)


def load(path: str, fgram_tokens=None, fgram_lengths=None, hashing=None) -> GPT:
    """A checkpoint of `save`: a `Scone` when it has an f-gram model (its table's tokens
    then come from ``fgram_tokens``/``fgram_lengths``, or stay empty), an `EngramGPT`
    when it has an Engram module (its hash ids from ``hashing``), else a `GPT`."""
    ck = torch.load(path, map_location="cpu", weights_only=True)
    cfg = Config(**{**ck["config"], "engram_sizes": tuple(ck["config"]["engram_sizes"])})
    if any(k.startswith("fgram.") for k in ck["state"]):
        if fgram_tokens is None:
            fgram_tokens = torch.zeros((0, cfg.max_len), dtype=torch.long)
            fgram_lengths = torch.zeros(0, dtype=torch.long)
        model: GPT = Scone(cfg, fgram_tokens, fgram_lengths)
    elif any(k.startswith("engram.") for k in ck["state"]):
        model = EngramGPT(cfg, hashing)
    else:
        model = GPT(cfg)
    model.load_state_dict(ck["state"])
    return model.eval()


def fgram_model(device: str = "cpu"):
    """``fgram embed --model scone_model:fgram_model``: the f-gram model of the
    checkpoint ``$SCONE_TINY_CHECKPOINT``, as fgram's model interface."""
    from fgram.pipeline.models.torch import TorchModel

    path = os.environ.get("SCONE_TINY_CHECKPOINT")
    if not path:
        raise RuntimeError("set SCONE_TINY_CHECKPOINT to a trained SCONE checkpoint")
    model = load(path)
    if not isinstance(model, Scone):
        raise RuntimeError(f"{path}: a baseline checkpoint has no f-gram model")
    return TorchModel(model.fgram, device)


def perplexity(loss: float) -> float:
    return math.exp(loss)
