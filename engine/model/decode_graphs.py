"""CUDA graphs for decode-only iterations (EngineConfig.cuda_graphs).

A decode step of a small model launches hundreds of kernels (a few per layer and per linear),
each short at small batch, so on a GPU the launches themselves may dominate (to be measured:
docs/perf/run_gpu.sh). Captured once per batch-size bucket and replayed, the whole forward is one
launch. A graph replays fixed shapes and addresses, so a bucket's forward reads persistent input
buffers: token ids, positions, slot mapping, context lengths and block tables, which each step
overwrites in place (from pinned host memory, without waiting for the GPU). A batch of n rows runs
in the smallest bucket >= n; the spare rows are padding that writes no K/V (slot -1), attends to
no key (context 0: zero output) and whose hidden states nobody samples. Telemetry is built from the
scheduled rows, so the padding never shows.

Every bucket is captured when the engine starts, largest first (the smaller ones reuse its memory
pool), on all-padding inputs that touch no K/V, one engine at a time in the process and on the
runner's own device and stream. A graph ends at the final hidden states; the LM head runs eagerly
on the rows that sample (every bucket's logits kept alive would take, for buckets up to 256 rows
and Qwen's 151,936-token vocabulary in bf16, 4,231 rows x 151,936 x 2 bytes = 1.3 GB), which is the
whole of the logits for every model family Inflight supports.

Only the Triton attention backend can be captured (the reference backend sizes its gathers from
host values every step). Without CUDA, under TRITON_INTERPRET=1, the same bucketed forward runs
eagerly: that is how the CPU tests check the padding.

A graph still replays every kernel the forward launched, and Hugging Face's layers launch about forty
each (an RMSNorm alone is a cast, a square, a mean, an rsqrt and two multiplies): on an H100, Qwen2.5-0.5B's
one-row step kept the GPU busy 2.5 ms against a 0.35 ms memory floor. EngineConfig.torch_compile (on by
default where graphs are captured) builds the buckets' forward with torch.compile first, so each run of
small operators is one fused kernel: compiled once, with the row count symbolic, then captured per bucket
as before (docs/PERFORMANCE.md has the figures).
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections import Counter

import torch

from ..device_memory import CUDA_CAPTURE_LOCK
from .attention import META_KWARG, BatchMeta
from .device_tokens import pending_inputs
from .files.model_files import user_cache
from .runner import on_device
from .triton_attention import PagedAttnInputs, query_tile
from .triton_hf import pool_key

log = logging.getLogger(__name__)


def buckets(max_rows: int) -> list[int]:
    """Batch sizes that get a graph: 1, 2, 4, 8, then every multiple of 8, up to max_rows."""
    sizes = [b for b in (1, 2, 4) if b < max_rows] + list(range(8, max_rows + 8, 8))
    return [b for b in sizes if b < max_rows] + [max_rows]


class DecodeGraphs:
    """Persistent inputs and one graph per bucket, for a runner's decode-only steps."""

    def __init__(self, runner, max_rows: int, max_blocks: int, capture: bool, compiled: bool = False):
        """compiled: the bucketed forward goes through torch.compile (see _compile) before any capture."""
        # No reference back to the runner (it holds this): engines are freed when dropped, not by a
        # garbage collection that could come in the middle of another lane's capture.
        self.device, self.pool, self.capture = runner.device, runner.pool, capture
        self.pool_key = pool_key(self.pool)
        self.pad_token_id, dev = runner.pad_token_id, runner.device
        self.decoder, self.lm_head = runner.model.get_decoder(), runner.model.get_output_embeddings()
        # compiled: no bucket of one row (the compiler specialises a size of 1: a second compile for it), its
        # step runs in the bucket of two
        every = buckets(max_rows)
        self.sizes = every[1 if compiled and max_rows > 1 else 0:]
        m = self.sizes[-1]
        # All padding to start with: what the captures run on. The forward's inputs have a spare row, so no
        # bucket's view is a whole buffer (the compiler would take that for a rule and recompile the others).
        self.ids = torch.full((1, m + 1), self.pad_token_id, dtype=torch.long, device=dev)
        self.positions = torch.zeros((1, m + 1), dtype=torch.long, device=dev)
        self.slots = torch.full((m + 1,), -1, dtype=torch.long, device=dev)
        self.context = torch.zeros(m + 1, dtype=torch.int32, device=dev)
        self.tables = torch.zeros(m + 1, max_blocks, dtype=torch.int32, device=dev)
        self.sample_rows = torch.zeros(m, dtype=torch.long, device=dev)
        pinned = dev.type == "cuda"
        self.matrix_rows = torch.zeros(m, dtype=torch.long, device=dev)  # overlap: each row's table-matrix row
        self.last_tokens = runner.last_tokens  # (None: no overlap; else where pending input ids are filled from)
        # ids, positions, slots, sample rows, table-matrix rows
        self.host64 = torch.empty((5, m), dtype=torch.long, pin_memory=pinned)
        self.host32 = torch.empty(m + m * max_blocks, dtype=torch.int32, pin_memory=pinned)  # context, tables
        self._np64, self._np32 = self.host64.numpy(), self.host32.numpy()  # the same memory, written by NumPy
        self._copied = None  # CUDA event: the last staging copies are done, the pinned buffers free
        ones = torch.ones(m + 1, dtype=torch.int32, device=dev)
        starts = torch.arange(m + 1, dtype=torch.int32, device=dev)
        self._inputs = {b: PagedAttnInputs(starts[:b], ones[:b], self.context[:b], self.tables[:b], self.slots[:b],
                                           max_query_len=1) for b in every}
        self.block_q = query_tile(runner.hf_config.num_attention_heads, runner.kv_shape.kv_heads, 1)
        self._tiles = {b: self._inputs[b].tiles(self.block_q, b) for b in every}  # fixed: one token a row
        self.captured: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # bucket -> graph, hidden out
        self.failed: str | None = None  # why capture was given up (then every step runs eagerly)
        self.steps: Counter[tuple[int, int]] = Counter()  # (rows, bucket) -> steps run through a bucket
        self._hidden = decoder_hidden
        self.compile_failed: str | None = None  # why torch.compile was given up (then the forward runs as is)
        self.compile_s: float | None = None  # how long the compile took, where it did
        self.graph_breaks = 0  # where the compiled forward is split in pieces (it still works, less fused)
        if compiled:
            self._compile(every)
        if capture:
            self._capture_all()

    def fits(self, batch) -> bool:
        """A decode-only batch (one token per row) that a bucket holds."""
        n = len(batch.ids)
        return self.failed is None and not batch.prefills and len(batch.dec_idx) == n and 0 < n <= self.sizes[-1]

    def logits(self, batch) -> torch.Tensor:
        """Logits [rows that sample, vocab] of a batch that fits, through its bucket."""
        size = next(b for b in self.sizes if b >= len(batch.ids))
        self.steps[len(batch.ids), size] += 1
        self._stage(batch, size)
        if self.capture:
            graph, hidden = self.captured[size]
            graph.replay()
        else:
            hidden = self._forward(size)
        return self.lm_head(hidden.index_select(0, self.sample_rows[:len(batch.sample_idx)]))

    def _stage(self, batch, size: int) -> None:
        """Write the batch into the persistent inputs, from host staging (pinned on CUDA: the copies
        do not make the host wait)."""
        if self._copied is not None and not self._copied.query():
            self._copied.synchronize()  # the last staging copies still queued (overlap: behind the step in flight)
        ids, positions, slots, keep, ctx, tables, matrix_rows = batch.decode_arrays()
        n, k, width = len(ids), len(keep), tables.shape[1]
        h, h32 = self._np64, self._np32  # (a NumPy write costs a fraction of a tensor op's dispatch)
        h[0, :n], h[0, n:size] = ids, self.pad_token_id
        h[1, :n], h[1, n:size] = positions, 0
        h[2, :n], h[2, n:size] = slots, -1  # padding rows and unstored tokens write nowhere
        h[3, :k] = keep
        h32[:n], h32[n:size] = ctx, 0
        h32[size:size + n * width] = tables.reshape(-1)
        host, host_ctx, host_tables = self.host64, self.host32[:size], self.host32[size:size + n * width]
        self.ids[0, :size].copy_(host[0, :size], non_blocking=True)
        self.positions[0, :size].copy_(host[1, :size], non_blocking=True)
        self.slots[:size].copy_(host[2, :size], non_blocking=True)
        self.sample_rows[:k].copy_(host[3, :k], non_blocking=True)
        self.context[:size].copy_(host_ctx, non_blocking=True)
        self.tables[:n, :width].copy_(host_tables.view(n, width), non_blocking=True)
        fill = pending_inputs(ids, slice(None), matrix_rows)  # (every token is a decode row's)
        if fill:  # overlap: tokens the step before sampled, not yet read back
            h[4, :n] = fill[0]
            self.matrix_rows[:n].copy_(host[4, :n], non_blocking=True)
            self.last_tokens.fill(self.ids[0, :n], self.matrix_rows[:n], *fill[1:])
        if self.capture:
            self._copied = torch.cuda.Event()
            self._copied.record()

    def _forward(self, size: int) -> torch.Tensor:
        """Final hidden states [size, hidden] of the bucket's rows."""
        i = self._inputs[size]
        return self._hidden(self.decoder, self.pool, self.pool_key, self.block_q, self.ids[0, :size],
                            self.positions[0, :size], i.query_start, i.query_len, i.context_len, i.block_tables,
                            i.slot_mapping, *self._tiles[size])

    @torch.inference_mode()
    def _compile(self, every: list[int]) -> None:
        """The forward through torch.compile, compiled here on all-padding inputs, the row count left symbolic
        so that every bucket runs the same code (each is run once here: nothing compiles after this), fused
        kernels and far fewer launches a step. A compile that fails, or that torch would give up on (its limit
        of compiles a function), leaves the forward uncompiled, with every bucket, and says why."""
        t0, stats = time.perf_counter(), torch._dynamo.utils.counters
        breaks0 = sum(stats["graph_break"].values())
        # inductor's kernels where a restart (after a reboot too) finds them, not in /tmp
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(user_cache() / "torchinductor"))
        self._hidden = torch.compile(decoder_hidden, dynamic=True)
        try:
            with on_device(self.device), _compile_settings():
                for size in reversed(self.sizes):
                    self._forward(size)
            self.compile_s = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - any compiler failure: the uncompiled forward serves
            self._hidden, self.sizes = decoder_hidden, every
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            self.compile_failed = f"{type(e).__name__}: {first[:200]}"
            log.warning("torch.compile of the decode forward failed, it runs uncompiled: %s", self.compile_failed)
        self.graph_breaks = sum(stats["graph_break"].values()) - breaks0
        if self.graph_breaks:
            log.warning("the compiled decode forward has %d graph breaks: %s", self.graph_breaks, dict(stats["graph_break"]))

    @torch.inference_mode()
    def _capture_all(self) -> None:
        """Warm up and capture every bucket, largest first, on the all-padding inputs."""
        dev = self.device
        with CUDA_CAPTURE_LOCK, torch.cuda.device(dev):
            prev = torch.cuda.current_stream(dev)
            stream = torch.cuda.Stream(device=dev)
            pool = None
            gc.collect()
            collecting = gc.isenabled()
            gc.disable()  # a collection freeing CUDA objects mid-capture invalidates the capture
            try:
                for size in reversed(self.sizes):
                    stream.wait_stream(prev)
                    with torch.cuda.stream(stream):
                        self._forward(size)  # compiles this bucket's kernels outside the capture
                    graph = torch.cuda.CUDAGraph()
                    # thread_local: lanes in other threads may use the GPU meanwhile
                    with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                        hidden = self._forward(size)
                    pool = graph.pool()
                    self.captured[size] = (graph, hidden)
                prev.wait_stream(stream)
            except RuntimeError as e:  # a host sync or an uncapturable op in the forward: run eagerly
                self.captured.clear()
                self.failed = f"{type(e).__name__}: {e}"
                log.warning("CUDA graph capture failed, decode steps run without graphs: %s", self.failed)
            finally:
                torch.cuda.set_stream(prev)  # a failed capture can leave the capture stream current
                if collecting:
                    gc.enable()


def _compile_settings():
    """While compiling: reaching torch's limit of compiles a function raises (it would run the function
    uncompiled, silently), the limit is raised for a process that builds engines of many models, and
    sizes that happen to be equal are not taken to be always equal (duck shaping: a bucket's row count
    equal to the block tables' width would compile again for the other buckets)."""
    dynamo = {k: v for k, v in (("recompile_limit", 64), ("fail_on_recompile_limit_hit", True))
              if hasattr(torch._dynamo.config, k)}
    import torch.fx.experimental._config as shapes
    stack = contextlib.ExitStack()
    stack.enter_context(torch._dynamo.config.patch(**dynamo))
    if hasattr(shapes, "use_duck_shape"):
        stack.enter_context(shapes.patch(use_duck_shape=False))
    return stack


def decoder_hidden(decoder, pool, key: int, block_q: int, ids, positions, starts, lens, context, tables, slots,
                   tile_start, tile_seq) -> torch.Tensor:
    """Final hidden states [rows, hidden] of a decode-only bucket (one token a row; ids and positions [rows]).
    What differs between engines and buckets is an argument: the pool's key is an integer the compiler
    leaves symbolic, the row count a symbolic size, so one compile serves every bucket and every engine on
    the same weights with the same attention shape (a decoder or block_q of their own compile again)."""
    inputs = PagedAttnInputs(starts, lens, context, tables, slots, max_query_len=1,
                             _tiles={block_q: (tile_start, tile_seq)})
    meta = BatchMeta(pool=pool, num_tokens=ids.shape[0], write_idx=None, write_slots=slots, decode_idx=starts,
                     decode_blocks=tables, decode_ctx=context, prefills=[], kernel_inputs=inputs, pool_key=key)
    return decoder(input_ids=ids[None], position_ids=positions[None], use_cache=False,
                   **{META_KWARG: meta}).last_hidden_state[0]
