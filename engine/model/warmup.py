"""Warm-up: an engine compiles every kernel variant it can reach before it serves.

Triton compiles a kernel the first time a launch meets a new variant (kernel_variants.py); on an H100 that
happened inside a first measured run, though the decode graphs had been captured at load. The kernels
specialise on nothing a step's size changes but the query tile (triton_attention.query_tile_lengths), so
one forward per tile height reaches them all: a decode row, then one prefill per tile height, the last of
the whole token budget (the largest activations, which also sizes the allocator's pools once). Each runs
on scratch KV blocks of the engine's own pool, zeroed after, and samples its logits (greedy and seeded),
so nothing of it is left for a request to meet.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..kv import KVCacheManager
from ..request import SamplingParams
from . import kernel_variants
from .packed_batch import PackedBatch
from .runner import ModelRunner, on_device
from .sampler import make_generator, sample

# (done, total, what runs next) while warming up
WarmupProgress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class WarmupReport:
    seconds: float               # on the engine's clock
    batches: tuple[str, ...]     # what ran, in order
    compiled: int                # kernel variants compiled meanwhile (JIT cache misses)

    def as_dict(self) -> dict:
        return {"seconds": self.seconds, "batches": list(self.batches), "compiled": self.compiled}


def warmup_lengths(runner: ModelRunner, longest: int, largest: int) -> list[int]:
    """The query length of each warm-up forward (one sequence each): 1 (a decode row), the shortest query
    of each larger tile height up to `longest` (the longest query a step can hold), and `largest` (the
    most tokens a step computes), which stands for the tile height it falls in."""
    lengths = [1]
    if runner.backend == "triton":
        from .triton_attention import query_tile_lengths
        lengths = query_tile_lengths(runner.hf_config.num_attention_heads, runner.kv_shape.kv_heads, longest)
    below = [n for n in lengths if n <= largest]
    return sorted(set([1] + below[:-1] + [largest] + [n for n in lengths if n > largest]))


def warm_up(runners: list[ModelRunner], longest: int, largest: int, clock,
            on_progress: WarmupProgress | None = None) -> WarmupReport:
    """Run the warm-up forwards of every runner (an engine's model, then its draft model)."""
    plan = [(r, n) for r in runners for n in warmup_lengths(r, _fits(r, longest), _fits(r, largest))]
    names = tuple(("decode row" if n == 1 else f"prefill of {n} tokens") + (" (draft model)" if r is not runners[0]
                                                                            else "") for r, n in plan)
    t0, compiled0 = clock(), kernel_variants.compiled_in_this_thread()
    for i, ((runner, n), name) in enumerate(zip(plan, names)):
        if on_progress is not None:
            on_progress(i, len(plan), name)
        _forward(runner, n)
    if on_progress is not None:
        on_progress(len(plan), len(plan), "done")
    return WarmupReport(clock() - t0, names, kernel_variants.compiled_in_this_thread() - compiled0)


def merged_warmup(*reports: WarmupReport | None) -> WarmupReport | None:
    """Warm-ups run one after the other (a disaggregated lane's halves), as one."""
    ran = [r for r in reports if r is not None]
    if not ran:
        return None
    return WarmupReport(sum(r.seconds for r in ran), tuple(b for r in ran for b in r.batches),
                        sum(r.compiled for r in ran))


def _fits(runner: ModelRunner, n: int) -> int:
    """n, or fewer: what the runner's KV pool holds."""
    return max(1, min(n, runner.pool.num_blocks * runner.pool.block_size))


@torch.inference_mode()
def _forward(runner: ModelRunner, n: int) -> None:
    """One forward of a single sequence of n tokens on scratch blocks, its logits sampled, the blocks
    zeroed again (the pool holds nothing but zeros where no request wrote)."""
    scratch = KVCacheManager(runner.pool.num_blocks, runner.pool.block_size)
    scratch.allocate(0, n)
    blocks = torch.tensor(scratch.block_tables[0], device=runner.device)
    with on_device(runner.device):
        batch = PackedBatch(runner, scratch)
        batch.add_tokens(_Scratch, [runner.pad_token_id] * n, 0, num_samples=1)
        logits = runner.forward(batch)
        params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.8, top_p=0.9, top_k=20, seed=0)]
        sample(logits.expand(2, -1), params, [None, make_generator(0, runner.device)]).tolist()
        for layer in range(len(runner.pool.k)):
            runner.pool.k[layer].index_fill_(0, blocks, 0)
            runner.pool.v[layer].index_fill_(0, blocks, 0)


class _Scratch:
    request_id = 0  # the scratch sequence's id in its own KVCacheManager
