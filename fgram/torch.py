"""A PyTorch dataset of an annotate output (``pip install 'fgram[torch]'``).

    from torch.utils.data import DataLoader
    from fgram.torch import FgramDataset, collate

    ds = FgramDataset("TAGS", seq_len=2048, seed=0, rank=rank, world_size=world)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate)
    for batch in loader:   # tokens, fgram_ids, match_len [8, 2048]; fgrams, fgram_len
        ...
    state = ds.state_dict(samples_seen)   # later: ds.load_state_dict(state)

With ``engram`` (an `fgram.engram.EngramHashing`, or a config with ``tokenizer``), each
sample also holds Engram's hash ids of its window, ``engram_<layer>`` [T, (N-1)*H]
(stacked by `collate`), so the trainer hashes nothing in its step.

Sample i is the i-th window of ``seq_len`` positions of the tags' stream (their
matches cut at the window's start, as `training_sequences` cuts them), in a seeded
permutation per epoch when ``seed`` is given; a rank takes every ``world_size``-th
sample of that order (the same count on every rank). Each process (a DataLoader
worker too) opens the tags once, mapped, never copied.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fgram.pipeline.tables.tags import FgramTags


class FgramDataset(torch.utils.data.Dataset):
    """Map-style: ``len(ds)`` samples of this rank, ``ds[i]`` a dict of tensors."""

    def __init__(
        self,
        tags: str,
        seq_len: int,
        seed: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        storage: dict[str, Any] | None = None,
        engram: Any = None,
        tokenizer: str | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        self.engram = _engram(engram, tokenizer)
        self.tags, self.seq_len, self.seed = str(tags), seq_len, seed
        self.rank, self.world_size, self.storage = rank, world_size, storage
        self.epoch, self.start = 0, 0
        self._reader: FgramTags | None = None
        self._pid = -1
        self.windows = len(self.reader) // seq_len
        self.per_rank = self.windows // world_size

    @property
    def reader(self) -> FgramTags:
        """The tags, opened once in each process (a forked worker opens its own)."""
        import os

        if self._reader is None or self._pid != os.getpid():
            self._reader, self._pid = FgramTags.open(self.tags, storage=self.storage), os.getpid()
        return self._reader

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None, "_pid": -1}

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose permutation the samples follow (with a seed)."""
        self.epoch = epoch

    def order(self) -> np.ndarray:
        """This rank's window numbers, in this epoch's order."""
        every = np.arange(self.windows)
        if self.seed is not None:
            every = np.random.default_rng([self.seed, self.epoch]).permutation(self.windows)
        return every[: self.per_rank * self.world_size][self.rank :: self.world_size]

    def __len__(self) -> int:
        return self.per_rank - self.start

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        w = int(self.order()[self.start + i])
        t, f, m = self.reader.window(w * self.seq_len, self.seq_len)
        sample = {
            "tokens": torch.from_numpy(t),
            "fgram_ids": torch.from_numpy(f),
            "match_len": torch.from_numpy(m.astype(np.int64)),
        }
        if self.engram is not None:  # the window is Engram's sequence: padded at its start
            for layer, ids in self.engram.hash(t[None, :]).items():
                sample[f"engram_{layer}"] = torch.from_numpy(ids[0])
        return sample

    def state_dict(self, samples_seen: int) -> dict[str, Any]:
        """Where to resume: this epoch, after ``samples_seen`` of its samples here."""
        return {"epoch": self.epoch, "start": self.start + samples_seen, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed") != self.seed:
            raise ValueError(f"a state of seed {state.get('seed')}, this dataset's is {self.seed}")
        self.epoch, self.start = int(state["epoch"]), int(state["start"])


def _engram(engram: Any, tokenizer: str | None) -> Any:
    """An `fgram.engram.EngramHashing`, from one, or from a config (an `EngramConfig` or
    its file) and the tokenizer whose ids the tags hold."""
    if engram is None:
        return None
    from fgram.engram import EngramConfig, EngramHashing

    if isinstance(engram, EngramHashing):
        return engram
    config = engram if isinstance(engram, EngramConfig) else EngramConfig.load(str(engram))
    if tokenizer is None:
        raise ValueError("engram= a config needs tokenizer= (the tags' tokenizer)")
    return EngramHashing(config, tokenizer)


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack the samples, and give the batch's distinct f-grams: ``fgrams`` [G] their
    ids, ``fgram_tokens`` [G, K] their tokens (left-aligned, -1 past the end) and
    ``fgram_len`` [G], read from the windows where each first matches, and
    ``fgram_index`` [B, T]: each position's row in them (-1: no f-gram)."""
    batch = {k: torch.stack([s[k] for s in samples]) for k in samples[0]}
    T = batch["tokens"].numpy()
    F = batch["fgram_ids"].numpy()
    M = batch["match_len"].numpy()
    hit = (F >= 0) & (M >= 2)
    ids, first, where = np.unique(F[hit], return_index=True, return_inverse=True)
    flat = np.flatnonzero(hit.reshape(-1))[first]
    lens = M.reshape(-1)[flat]
    k = int(lens.max()) if len(lens) else 0
    cols = np.arange(k)
    src = (flat - lens + 1)[:, None] + cols[None, :]
    inside = cols[None, :] < lens[:, None]
    grams = np.where(inside, T.reshape(-1)[np.where(inside, src, 0)], -1)
    index = np.full(F.shape, -1, np.int64)
    index[hit] = where
    batch |= {
        "fgrams": torch.from_numpy(ids.astype(np.int64)),
        "fgram_tokens": torch.from_numpy(grams.astype(np.int64).reshape(len(ids), k)),
        "fgram_len": torch.from_numpy(lens.astype(np.int64)),
        "fgram_index": torch.from_numpy(index),
    }
    return batch
