"""A unit's packed order against its plain one: the same positions per key, every size."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fgram.pipeline.kernels.counting import ids_at, unit_table
from fgram.pipeline.kernels.packing import pack_order, unpack_order
from fgram.pipeline.kernels.scratch import Scratch

position = st.integers(min_value=0, max_value=2**31 - 1)


def _order(groups: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.zeros(len(groups) + 1, np.int32)
    np.cumsum([len(g) for g in groups], out=starts[1:])
    flat = [p for g in groups for p in g]
    return np.array(flat, np.int32), starts


def _varint_bytes(x: int) -> int:
    return max(1, (x.bit_length() + 6) // 7)


@given(st.lists(st.lists(position, max_size=8), max_size=40))
def test_packed_order_holds_each_keys_positions(groups):
    """Any positions in any order per key (a key may have none), the largest a unit
    holds included: unpacked, each key has the same positions, ascending."""
    positions, starts = _order(groups)
    packed = pack_order((positions.copy(), starts))
    assert packed.dtype == np.uint8
    got_positions, got_starts = unpack_order(packed)
    assert np.array_equal(got_starts, starts)
    for r, group in enumerate(groups):
        assert got_positions[got_starts[r] : got_starts[r + 1]].tolist() == sorted(group)
    # the size is the header and each key's size and ascending deltas, one varint each
    size = _varint_bytes(len(groups)) + _varint_bytes(len(positions))
    for group in groups:
        deltas = np.diff([0, *sorted(group)]).tolist()
        size += _varint_bytes(len(group)) + sum(_varint_bytes(d) for d in deltas)
    assert len(packed) == size


@given(st.lists(st.integers(0, 30), max_size=300), st.booleans())
def test_the_next_pass_reads_the_same_ids_from_a_packed_order(tokens, exact):
    """A unit's order from `unit_table` (both of its paths), packed and unpacked into a
    worker's scratch, gives `ids_at` the ids the plain order gives."""
    t = np.array(tokens, np.uint32)
    uniq, _, order, _ = unit_table(t, t, 2, len(t), want_order=True, exact=exact)
    assert order is not None
    plain = ids_at(np.arange(len(uniq), dtype=np.uint32), order, len(t)).copy()
    scratch = Scratch()
    unpacked = unpack_order(pack_order(order, scratch), scratch)
    assert np.array_equal(ids_at(np.arange(len(uniq), dtype=np.uint32), unpacked, len(t)), plain)


def test_an_empty_order_packs_to_its_header():
    packed = pack_order((np.zeros(0, np.int32), np.zeros(1, np.int32)))
    assert packed.tolist() == [0, 0]
    positions, starts = unpack_order(packed)
    assert len(positions) == 0 and starts.tolist() == [0]


@pytest.mark.parametrize("cut", [0, 1, 5])
def test_a_cut_packed_order_is_refused(cut):
    """Bytes missing at the end (or none at all) are an error, never a read past them."""
    packed = pack_order(_order([[3, 1000, 70000], [5], [2**31 - 1]]))
    with pytest.raises(ValueError, match="packed order"):
        unpack_order(packed[: len(packed) - cut] if cut else packed[:0])


def test_bytes_left_after_the_last_key_are_refused():
    packed = pack_order(_order([[1, 2]]))
    with pytest.raises(ValueError, match="ends at byte"):
        unpack_order(np.concatenate([packed, np.zeros(1, np.uint8)]))
