"""Decode rows grouped by length (the reference backend's decode attention): the same output as one
batch padded to its longest row, the old path kept as the oracle."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from engine.model import attention
from engine.model.packed_batch import decode_groups
from tiers import examples


def test_groups_split_where_a_row_needs_half_the_width_or_less():
    assert decode_groups([]) == []
    assert decode_groups([9, 8, 5, 4, 4, 2, 1]) == [(0, 3, 9), (3, 5, 4), (5, 6, 2), (6, 7, 1)]
    assert decode_groups([3, 3, 2]) == [(0, 3, 3)]


def row_by_row(widths: list[int]) -> list[tuple[int, int, int]]:
    """The rule read one row at a time: a row starts a new group when 2 * its width <= its group's first."""
    groups, start = [], 0
    for i, w in enumerate(widths):
        if i > start and 2 * w <= widths[start]:
            groups.append((start, i, widths[start]))
            start = i
    return groups + ([(start, len(widths), widths[start])] if widths else [])


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.integers(1, 300), max_size=300))
def test_groups_follow_the_rule_row_by_row_for_any_widths(widths):
    widths = sorted(widths, reverse=True)
    assert decode_groups(widths) == row_by_row(widths)


@pytest.mark.parametrize("window", [None, 5])
def test_grouped_decode_equals_one_padded_batch(window):
    rng = random.Random(0)
    torch.manual_seed(0)
    block_size, kv_heads, heads, dim, num_blocks = 4, 2, 4, 8, 64
    ctxs = sorted((rng.randint(1, 40) for _ in range(9)), reverse=True)
    blocks = torch.randperm(num_blocks)
    tables, used = [], 0
    for c in ctxs:
        n = -(-c // block_size)
        tables.append(blocks[used:used + n].tolist())
        used += n
    width = len(tables[0])
    pool = SimpleNamespace(k=[torch.randn(num_blocks, block_size, kv_heads, dim)],
                           v=[torch.randn(num_blocks, block_size, kv_heads, dim)], block_size=block_size)
    query = torch.randn(1, heads, len(ctxs), dim)
    k_new = torch.randn(1, kv_heads, len(ctxs), dim)

    def run(groups, in_order=False):
        meta = attention.BatchMeta(
            pool=pool, num_tokens=len(ctxs), write_idx=None, write_slots=torch.tensor([], dtype=torch.long),
            decode_idx=torch.arange(len(ctxs)),
            decode_blocks=torch.tensor([t + [0] * (width - len(t)) for t in tables]),
            decode_ctx=torch.tensor(ctxs), prefills=[], decode_groups=groups, rows_in_order=in_order)
        out, _ = attention.paged_attention(SimpleNamespace(layer_idx=0), query, k_new, k_new, None, scaling=0.3,
                                           sliding_window=window, **{attention.META_KWARG: meta})
        return out

    groups = decode_groups([len(t) for t in tables])
    assert len(groups) > 1, "the lengths should make several groups"
    torch.testing.assert_close(run(groups), run(None), atol=1e-6, rtol=1e-5)
    # rows in token order (as here): each group's queries sliced and its output returned as it comes, the same
    assert all(torch.equal(run(g, in_order=True), run(g)) for g in (groups, None))
