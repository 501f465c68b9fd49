"""HostInts: a step's integers reach the device whole and in order, however they were given."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.model.packed_batch import HostInts, one_copy
from tiers import examples

INTS = st.integers(-2**40, 2**40)
PART = st.one_of(st.lists(INTS, max_size=12),
                 st.lists(st.integers(-2**31, 2**31 - 1), max_size=12).map(lambda v: np.array(v, dtype=np.int32)),
                 st.integers(0, 4).flatmap(lambda r: st.lists(INTS, min_size=3 * r, max_size=3 * r)).map(
                     lambda v: np.array(v, dtype=np.int64).reshape(-1, 3)))


@settings(max_examples=examples(200), deadline=None)
@given(parts=st.lists(PART, max_size=8))
def test_every_part_comes_back_flat_and_equal(parts):
    up = HostInts()
    idx = [up.add(p) for p in parts]
    want = [np.asarray(p, dtype=np.int64).reshape(-1).tolist() for p in parts]
    sent = up.send(torch.device("cpu"))
    assert [sent[i].tolist() for i in idx] == want and all(t.dtype == torch.int64 for t in sent)
    # what CUDA does: one copy, each part a view of it (the copy here is a clone)
    one = one_copy([np.asarray(p, dtype=np.int64).reshape(-1) for p in parts], torch.clone)
    assert [t.tolist() for t in one] == want


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_parts_travel_as_one_copy():
    parts = [[1, 2, 3], np.arange(6, dtype=np.int32), np.arange(12, dtype=np.int64).reshape(-1, 3), []]
    up = HostInts()
    idx = [up.add(p) for p in parts]
    sent = up.send(torch.device("cuda"))
    assert all(t.device.type == "cuda" and t.dtype == torch.int64 for t in sent)
    assert len({t.untyped_storage().data_ptr() for t in sent}) == 1  # views of one copy
    assert [sent[i].tolist() for i in idx] == [np.asarray(p, dtype=np.int64).reshape(-1).tolist() for p in parts]
