"""The draft model of speculative decoding (speculative = "draft"): a smaller causal LM with the target's
tokenizer chooses each speculating row's draft, k greedy steps batched over the rows that speculate.

Its paged KV has the target's block layout: a pool of as many blocks, addressed through the same block
tables, so a block the prefix cache keeps holds the draft model's K/V of the same tokens, and trimming,
preemption and freeing need nothing of their own. Each step it computes the tokens the target computes
(prompt chunks included), then the drafts one position at a time, the last draft's K/V too: whatever
verification accepts already has its draft K/V.

Drafts are the draft model's greedy picks, for rows that sample too: a proposal certain of its token is
what rejection sampling (spec_sampling.py) verifies exactly.
"""
from __future__ import annotations

import dataclasses

import torch

from ..config import EngineConfig
from ..kv import KVCacheManager, KVPool
from ..scheduler import ScheduledRow
from .packed_batch import PackedBatch, token_slice
from .runner import ModelRunner, on_device
from .sampler import greedy_tokens


class DraftModel:
    def __init__(self, cfg: EngineConfig, target: ModelRunner, max_model_len: int, progress=None):
        draft_cfg = dataclasses.replace(cfg, model=cfg.speculative_model, speculative="off", speculative_model=None,
                                        cuda_graphs=False, torch_compile=False)
        self.runner = ModelRunner(draft_cfg, progress, field="speculative_model")
        _check_pair(cfg, self.runner, target, max_model_len)
        self.kv_shape = self.runner.kv_shape
        self.vocab_size = min(self.runner.vocab_size, target.vocab_size)  # ids both models embed

    def allocate_kv(self, num_blocks: int, block_size: int) -> None:
        r = self.runner
        r.pool = KVPool(self.kv_shape, num_blocks, block_size, r.dtype, r.device)

    @torch.inference_mode()
    def propose(self, rows: list[ScheduledRow], cache: KVCacheManager) -> None:
        """Compute this step's tokens, then fill in every row's draft (sized by the scheduler)."""
        with on_device(self.runner.device):
            self._run(self._mirror(rows, cache), 0)
            for j in range(max((len(r.draft) for r in rows), default=0)):
                self._run(self._feed(rows, cache, j), j + 1)

    def _mirror(self, rows: list[ScheduledRow], cache: KVCacheManager) -> PackedBatch:
        """The step's real tokens (not its padding or drafts); a drafting row's first draft read after them."""
        batch = PackedBatch(self.runner, cache)
        for row in rows:
            n, req = row.num_new - len(row.draft), row.request
            if n:
                start = req.num_computed_tokens
                batch.add_tokens(req, token_slice(req, start, start + n), start, int(bool(row.draft)), row)
        return batch

    def _feed(self, rows: list[ScheduledRow], cache: KVCacheManager, j: int) -> PackedBatch:
        """Each row's draft j, after its last token; draft j + 1 read after it where the row has one."""
        batch = PackedBatch(self.runner, cache)
        for row in rows:
            if len(row.draft) > j:
                req = row.request
                batch.add_tokens(req, [row.draft[j]], req.num_computed_tokens + 1 + j, int(len(row.draft) > j + 1), row)
        return batch

    def _run(self, batch: PackedBatch, j: int) -> None:
        """Forward `batch`; each row it reads draft j of takes the draft model's greedy pick."""
        if not batch.ids:
            return
        logits = self.runner.forward(batch)
        if batch.sample_rows:
            for row, tok in zip(batch.sample_rows, greedy_tokens(logits[:, :self.vocab_size]).tolist()):
                row.draft[j] = tok


def _check_pair(cfg: EngineConfig, draft: ModelRunner, target: ModelRunner, max_model_len: int) -> None:
    """A draft model proposes ids the target reads as its own, at every position a request reaches."""
    if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise ValueError(f"EngineConfig.speculative_model: {cfg.speculative_model} does not share the tokenizer "
                         f"of {cfg.model}")
    if draft.max_positions < max_model_len:
        raise ValueError(f"EngineConfig.speculative_model: {cfg.speculative_model} reads at most "
                         f"{draft.max_positions} positions, fewer than max_model_len={max_model_len}")
