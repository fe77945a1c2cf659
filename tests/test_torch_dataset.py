"""`fgram.torch.FgramDataset`: every window once per epoch over ranks and DataLoader
workers, a resumed state continues with the same samples, and the collate function's
distinct f-grams are the table's (torch is an optional extra: skipped without it)."""

import numpy as np
import pytest
from helpers import build, result, write_bin

import fgram

torch = pytest.importorskip("torch", reason="fgram.torch needs torch (the torch extra)")


@pytest.fixture(scope="module")
def tags(tmp_path_factory):
    d = tmp_path_factory.mktemp("tds")
    rng = np.random.default_rng(1)
    docs = [list(rng.integers(1, 12, int(rng.integers(5, 60)))) for _ in range(80)]
    write_bin(str(d / "c.bin"), docs, sep=0)
    build(None, [d / "c.bin"], d / "t", doc_sep=0, min_count=2, max_len=4, engine="local")
    fgram.index(d / "t")
    fgram.annotate(d / "t", [d / "c.bin"], d / "tags", doc_sep=0, engine="local", unit_tokens=300)
    return d


def _windows(ds, workers):
    from torch.utils.data import DataLoader

    from fgram.torch import collate

    loader = DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=collate)
    return [row.tolist() for batch in loader for row in batch["tokens"]]


def test_two_ranks_two_workers_see_every_window_once(tags):
    from fgram.torch import FgramDataset

    seq = 16
    every = [t.tolist() for t, _, _ in fgram.training_sequences(tags / "tags", seq)]
    seen = []
    for rank in range(2):
        ds = FgramDataset(tags / "tags", seq, seed=5, rank=rank, world_size=2)
        assert len(ds) == len(every) // 2
        seen += _windows(ds, 2)
    assert sorted(seen) == sorted(every[: len(every) // 2 * 2])
    ds = FgramDataset(tags / "tags", seq, seed=5)
    first, again = _windows(ds, 0), _windows(ds, 0)
    assert first == again and first != sorted(first)  # the seed's permutation, each time
    ds.set_epoch(1)
    assert _windows(ds, 0) != first and sorted(_windows(ds, 0)) == sorted(first)


def test_a_resumed_dataset_continues_with_the_same_samples(tags):
    from fgram.torch import FgramDataset

    ds = FgramDataset(tags / "tags", 16, seed=3, rank=1, world_size=2)
    ds.set_epoch(2)
    whole = _windows(ds, 0)
    state = ds.state_dict(samples_seen=5)
    again = FgramDataset(tags / "tags", 16, seed=3, rank=1, world_size=2)
    again.load_state_dict(state)
    assert _windows(again, 2) == whole[5:]
    with pytest.raises(ValueError, match="seed"):
        FgramDataset(tags / "tags", 16, seed=4).load_state_dict(state)


def test_collate_gives_each_batch_its_distinct_fgrams(tags):
    from fgram.torch import FgramDataset, collate

    table = {g: i for i, (g, _) in enumerate(result(tags / "t"))}
    ds = FgramDataset(tags / "tags", 32)
    batch = collate([ds[i] for i in range(6)])
    ids, grams, lens = batch["fgrams"], batch["fgram_tokens"], batch["fgram_len"]
    assert len(ids) > 3 and len(set(ids.tolist())) == len(ids)
    for fid, row, n in zip(ids.tolist(), grams.tolist(), lens.tolist(), strict=True):
        assert table[tuple(row[:n])] == fid and all(t == -1 for t in row[n:])
    index, F = batch["fgram_index"], batch["fgram_ids"]
    hit = index >= 0
    assert (ids[index[hit]] == F[hit]).all() and (F[~hit] < 0).all()


def test_engram_hash_ids_come_with_each_window(tags):
    """engram=: each sample holds Engram's hash ids of its window (the window is the
    sequence: padded at its start), equal to hashing the window's tokens; collate stacks
    them with two DataLoader workers."""
    from torch.utils.data import DataLoader

    from fgram.engram import EngramConfig, EngramHashing
    from fgram.torch import FgramDataset, collate

    lookup = np.arange(64, dtype=np.int64) // 2  # pairs of ids share a canonical id
    cfg = EngramConfig(engram_vocab_size=[97, 101], max_ngram_size=3, n_head_per_ngram=2,
                       layer_ids=[1, 3], pad_id=0)  # fmt: skip
    hashing = EngramHashing(cfg, lookup=(lookup, 32))
    ds = FgramDataset(tags / "tags", seq_len=16, seed=1, engram=hashing)
    sample = ds[0]
    want = hashing.hash(sample["tokens"].numpy()[None, :])
    for layer in (1, 3):
        assert sample[f"engram_{layer}"].shape == (16, 4)
        assert np.array_equal(sample[f"engram_{layer}"].numpy(), want[layer][0])
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)
    batch = next(iter(loader))
    assert batch["engram_3"].shape == (4, 16, 4)
    assert np.array_equal(batch["engram_3"].numpy(), hashing.hash(batch["tokens"].numpy())[3])
