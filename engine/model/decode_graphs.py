"""CUDA graphs for decode-only iterations (EngineConfig.cuda_graphs).

A decode step of a small model on a GPU is mostly launch overhead: hundreds of kernels of a few
microseconds each. Captured once per batch-size bucket and replayed, the whole forward is one
launch. A graph replays fixed shapes and addresses, so a bucket's forward reads persistent input
buffers: token ids, positions, slot mapping, context lengths and block tables, which each step
overwrites in place (from pinned host memory, without waiting for the GPU). A batch of n rows runs
in the smallest bucket >= n; the spare rows are padding that writes no K/V (slot -1), attends to
no key (context 0: zero output) and whose logits nobody samples. Telemetry is built from the
scheduled rows, so the padding never shows.

Only the Triton attention backend can be captured (the reference backend sizes its gathers from
host values every step). Without CUDA, under TRITON_INTERPRET=1, the same bucketed forward runs
eagerly: that is how the CPU tests check the padding.
"""
from __future__ import annotations

import logging
from collections import Counter

import torch

from .attention import META_KWARG, BatchMeta
from .triton_attention import PagedAttnInputs

log = logging.getLogger(__name__)


def buckets(max_rows: int) -> list[int]:
    """Batch sizes that get a graph: 1, 2, 4, 8, then every multiple of 8, up to max_rows."""
    sizes = [b for b in (1, 2, 4) if b < max_rows] + list(range(8, max_rows + 8, 8))
    return [b for b in sizes if b < max_rows] + [max_rows]


class DecodeGraphs:
    """Persistent inputs and one graph per bucket, for a runner's decode-only steps."""

    def __init__(self, runner, max_rows: int, max_blocks: int, capture: bool):
        dev, self.runner, self.capture = runner.device, runner, capture
        self.sizes = buckets(max_rows)
        m = self.sizes[-1]
        self.ids = torch.full((1, m), runner.pad_token_id, dtype=torch.long, device=dev)
        self.positions = torch.zeros((1, m), dtype=torch.long, device=dev)
        self.slots = torch.full((m,), -1, dtype=torch.long, device=dev)
        self.context = torch.zeros(m, dtype=torch.int32, device=dev)
        self.tables = torch.zeros(m, max_blocks, dtype=torch.int32, device=dev)
        self.keep = torch.arange(m, device=dev)
        pinned = dev.type == "cuda"
        self.sample_rows = torch.zeros(m, dtype=torch.long, device=dev)
        self.host64 = torch.empty((4, m), dtype=torch.long, pin_memory=pinned)  # ids, positions, slots, sample rows
        self.host_ctx = torch.empty(m, dtype=torch.int32, pin_memory=pinned)
        self.host_tables = torch.empty(m * max_blocks, dtype=torch.int32, pin_memory=pinned)
        starts, ones = torch.arange(m, dtype=torch.int32, device=dev), torch.ones(m, dtype=torch.int32, device=dev)
        self._inputs = {b: PagedAttnInputs(starts[:b], ones[:b], self.context[:b], self.tables[:b], self.slots[:b],
                                           max_query_len=1) for b in self.sizes}
        self.captured: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # bucket -> graph, its logits
        self._pool = None
        self.failed: str | None = None  # why capture was given up (then every step runs eagerly)
        self.steps: Counter[tuple[int, int]] = Counter()  # (rows, bucket) -> steps run through a bucket

    def fits(self, batch) -> bool:
        """A decode-only batch (one token per row) that a bucket holds."""
        n = len(batch.ids)
        return self.failed is None and not batch.prefills and len(batch.dec_idx) == n and 0 < n <= self.sizes[-1]

    def logits(self, batch) -> torch.Tensor:
        """Logits [rows that sample, vocab] of a batch that fits, through its bucket."""
        size = next(b for b in self.sizes if b >= len(batch.ids))
        self.steps[len(batch.ids), size] += 1
        self._stage(batch, size)
        if not self.capture:
            out = self._forward(size)
        else:
            if size not in self.captured:
                self._capture(size)
            if self.failed is None:
                graph, out = self.captured[size]
                graph.replay()
            else:
                out = self._forward(size)
        return out.index_select(0, self.sample_rows[:len(batch.sample_idx)])

    def _stage(self, batch, size: int) -> None:
        """Write the batch into the persistent inputs: one copy each from (pinned) host staging.
        The host staging is free again: the previous step read its sampled tokens back."""
        n, pad = len(batch.ids), self.runner.pad_token_id
        h = self.host64
        h[0, :n], h[1, :n] = torch.tensor(batch.ids), torch.tensor(batch.positions)
        h[0, n:size], h[1, n:size], h[2, :size] = pad, 0, -1
        if batch.write_tok:
            h[2, torch.tensor(batch.write_tok)] = torch.tensor(batch.write_slots)
        k = len(batch.sample_idx)
        h[3, :k] = torch.tensor(batch.sample_idx, dtype=torch.long)
        self.host_ctx[:n] = torch.tensor(batch.dec_ctx, dtype=torch.int32)
        self.host_ctx[n:size] = 0
        width = max(len(t) for t in batch.dec_tables)
        host_tables = self.host_tables[:n * width].view(n, width)
        host_tables.zero_()
        for i, t in enumerate(batch.dec_tables):
            host_tables[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
        self.ids[0, :size].copy_(h[0, :size], non_blocking=True)
        self.positions[0, :size].copy_(h[1, :size], non_blocking=True)
        self.slots[:size].copy_(h[2, :size], non_blocking=True)
        self.sample_rows[:k].copy_(h[3, :k], non_blocking=True)
        self.context[:size].copy_(self.host_ctx[:size], non_blocking=True)
        self.tables[:n, :width].copy_(host_tables, non_blocking=True)

    def _forward(self, size: int) -> torch.Tensor:
        inputs = self._inputs[size]
        meta = BatchMeta(pool=self.runner.pool, num_tokens=size, write_idx=None, write_slots=inputs.slot_mapping,
                         decode_idx=self.keep[:size], decode_blocks=inputs.block_tables,
                         decode_ctx=inputs.context_len, prefills=[], kernel_inputs=inputs)
        return self.runner.model(input_ids=self.ids[:, :size], position_ids=self.positions[:, :size], use_cache=False,
                                 logits_to_keep=self.keep[:size], **{META_KWARG: meta}).logits[0]

    def _capture(self, size: int) -> None:
        """Warm up (compiles the kernels; writes this step's K/V, as the replay will again), then capture."""
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._forward(size)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: lanes in other threads may use the GPU while this one captures
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                out = self._forward(size)
            self._pool = graph.pool()
            self.captured[size] = (graph, out)
        except RuntimeError as e:  # a host sync or an uncapturable op in the forward: run eagerly
            self.failed = f"{type(e).__name__}: {e}"
            log.warning("CUDA graph capture failed, decode steps run without graphs: %s", self.failed)
