"""Torch f-gram models (optional extra: ``pip install 'fgram[torch]'``).

- `TorchModel`: adapts any ``torch.nn.Module`` mapping (tokens int64 [B, K],
  lengths int64 [B]) -> [B, d] to the numpy model interface of `fgram embed`
  (no gradients, on a chosen device, float32 rows back on the CPU).
- `FgramTransformer`: the reference f-gram model as SCONE describes it: the
  f-gram's tokens through a token-embedding matrix, plus learned absolute
  positions up to K, a small Transformer encoder (causal, padding masked), and
  the output at the f-gram's last token.
- ``fgram.pipeline.models.torch:reference``: a factory for ``--model`` that
  builds a seeded `FgramTransformer` (vocab 65536, d = 256) on ``device``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class TorchModel:
    """numpy (tokens [B, K] int32, lengths [B]) -> float32 [B, d], via a torch module."""

    def __init__(self, module: nn.Module, device: str = "cpu"):
        self.device = torch.device(device)
        self.module = module.to(self.device).eval()

    def __call__(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            t = torch.from_numpy(np.ascontiguousarray(tokens, np.int64)).to(self.device)
            n = torch.from_numpy(np.ascontiguousarray(lengths, np.int64)).to(self.device)
            out: np.ndarray = self.module(t, n).float().cpu().numpy()
            return out


class FgramTransformer(nn.Module):
    """Embeds an f-gram (right-padded tokens [B, K], lengths [B]) into [B, d]."""

    def __init__(
        self,
        token_embeddings: torch.Tensor,
        max_len: int = 8,
        layers: int = 2,
        heads: int = 4,
        freeze_tokens: bool = True,
    ):
        super().__init__()
        vocab, dim = token_embeddings.shape
        pretrained: Any = nn.Embedding.from_pretrained  # untyped where torch is installed
        self.tokens = pretrained(token_embeddings, freeze=freeze_tokens)
        self.positions = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, batch_first=True, norm_first=True, dropout=0.0
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer(
            "causal",
            torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1),
            persistent=False,
        )

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        width = tokens.shape[1]
        pos = torch.arange(width, device=tokens.device)
        x = self.tokens(tokens) + self.positions(pos)[None]
        pad = pos[None] >= lengths[:, None]
        causal: Any = self.causal  # a registered buffer: a Tensor
        h = self.encoder(x, mask=causal[:width, :width], src_key_padding_mask=pad)
        last = h[torch.arange(len(tokens), device=tokens.device), (lengths - 1).clamp(min=0)]
        out: torch.Tensor = self.norm(last)
        return out


def reference(device: str = "cpu", vocab: int = 65536, dim: int = 256, seed: int = 0) -> TorchModel:
    """A seeded reference model (random token embeddings) for tries and benchmarks."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = FgramTransformer(torch.randn(vocab, dim, generator=gen) / dim**0.5)
    return TorchModel(model, device)
