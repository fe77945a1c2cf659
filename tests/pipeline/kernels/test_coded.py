"""A unit's coded run against its plain keys and counts: the same entries, whole or by any
key range, at every block size; damaged bytes are refused, never read past."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgram.pipeline.kernels.coded import code_run, decode_run, run_slice
from fgram.pipeline.kernels.merging import key_slice

key = st.integers(min_value=0, max_value=2**64 - 1)
count = st.integers(min_value=0, max_value=2**32 - 1)
runs = st.lists(st.tuples(key, count), max_size=60, unique_by=lambda e: e[0]).map(sorted)


def _plain(entries):
    keys = np.array([k for k, _ in entries], np.uint64)
    return keys, np.array([c for _, c in entries], np.uint32)


def _varint_bytes(x: int) -> int:
    return max(1, (x.bit_length() + 6) // 7)


@given(runs, st.integers(min_value=1, max_value=7))
def test_a_coded_run_holds_its_entries_and_its_size_is_the_varints(entries, block):
    keys, counts = _plain(entries)
    data, index = code_run(keys, counts, block=block)
    got_keys, got_counts = decode_run(data, index)
    assert got_keys.tolist() == keys.tolist() and got_counts.tolist() == counts.tolist()
    deltas = [
        k - p for i, (p, k) in enumerate(zip([0, *keys.tolist()], keys.tolist())) if i % block
    ]
    assert len(data) == sum(map(_varint_bytes, deltas + counts.tolist()))
    assert len(index) == 3 * (-(-len(keys) // block) + 1)


@given(runs, st.integers(min_value=1, max_value=7), key, key | st.none())
def test_a_key_range_of_a_coded_run_is_the_plain_slice(entries, block, lo, hi):
    """Any [lo, hi) (hi None: to the end), from the blocks that may hold it, read by byte
    range: the entries `key_slice` gives of the plain arrays."""
    keys, counts = _plain(entries)
    data, index = code_run(keys, counts, block=block)
    reads = []

    def read(a, b):
        reads.append((a, b))
        return data[a:b]

    got_keys, got_counts = run_slice(read, index, lo, hi)
    a, b = key_slice(keys, lo, hi)
    assert got_keys.tolist() == keys[a:b].tolist() and got_counts.tolist() == counts[a:b].tolist()
    assert all(0 <= s <= e <= len(data) for s, e in reads)


def test_neighbouring_keys_of_count_one_take_two_bytes_an_entry_not_twelve():
    keys = np.arange(10**6, 10**6 + 50_000, 3, dtype=np.uint64) << np.uint64(16)
    data, index = code_run(keys, np.ones(len(keys), np.uint32))
    assert len(data) + index.nbytes < 4.1 * len(keys)  # 3 bytes a delta of 3 << 16, 1 a count
    small = np.arange(50_000, dtype=np.uint64)
    assert len(code_run(small, np.ones(len(small), np.uint32))[0]) < 2.01 * len(small)


@pytest.mark.parametrize("damage", ["cut", "extended", "overlong"])
def test_damaged_bytes_are_refused(damage):
    keys = np.arange(0, 5000, 7, dtype=np.uint64)
    data, index = code_run(keys, np.full(len(keys), 300, np.uint32), block=100)
    if damage == "cut":
        data = data[:-1]
    elif damage == "extended":
        data = np.concatenate([data, np.zeros(1, np.uint8)])
    else:  # every byte a continuation: a varint that never ends
        data = np.full(len(data), 0xFF, np.uint8)
    with pytest.raises(ValueError, match="coded run"):
        decode_run(data, index)
