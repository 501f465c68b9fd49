"""Roofline arithmetic per iteration: why a bigger batch is nearly free until it is not.

From the model's config and one step's batch: the bytes the step must move (every weight read once
for the whole batch, the KV cache read and written) and the FLOPs it must do (the linear layers,
attention). Divided by the step's duration and the device's measured peaks (engine/telemetry/device_peaks.py)
they give memory-bandwidth and compute utilization; FLOPs per byte is the arithmetic intensity. This
is the ideal traffic of a fused kernel, not a trace: activations, norms and biases are left out, and
a kernel that re-reads KV (as our torch reference backend does) moves more than counted here.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import torch

from ..kv.pool import kv_bytes_per_token, kv_shape

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelCost:
    """What one token costs this model, from its config."""
    num_layers: int
    num_heads: int
    head_dim: int
    linear_params: int        # matmul weights every token goes through (all layers, LM head excluded)
    lm_head_params: int       # hidden x vocab: only the rows that sample a token go through it
    elem_bytes: int           # bytes per weight and per KV element (the engine's dtype)
    kv_bytes_per_token: int   # K and V, every layer

    @classmethod
    def from_hf_config(cls, hf_config, dtype: torch.dtype) -> ModelCost:
        kv = kv_shape(hf_config)
        hidden, heads = hf_config.hidden_size, hf_config.num_attention_heads
        inter = (getattr(hf_config, "intermediate_size", None) or getattr(hf_config, "n_inner", None)
                 or 4 * hidden)
        mlp_mats = 2 if hf_config.model_type == "gpt2" else 3  # gated MLPs (Llama, Qwen, Mistral) have 3
        attn = 2 * hidden * heads * kv.head_dim + 2 * hidden * kv.kv_heads * kv.head_dim  # q, o; k, v
        per_layer = attn + mlp_mats * hidden * inter
        return cls(num_layers=kv.num_layers, num_heads=heads, head_dim=kv.head_dim,
                   linear_params=kv.num_layers * per_layer, lm_head_params=hidden * hf_config.vocab_size,
                   elem_bytes=dtype.itemsize, kv_bytes_per_token=kv_bytes_per_token(kv, dtype))

    @property
    def weight_bytes(self) -> int:
        return (self.linear_params + self.lm_head_params) * self.elem_bytes

    def attention_flops(self, keys: int) -> int:
        """QK^T and PV over `keys` (query, key) pairs, every head and layer."""
        return 4 * self.num_layers * self.num_heads * self.head_dim * keys


def step_work(cost: ModelCost, entries, num_sampled: int) -> tuple[int, int]:
    """(FLOPs, bytes) of one step. entries: StepEntry rows (padding included: it is computed);
    num_sampled: rows that went through the LM head."""
    tokens = keys = kv_read = 0
    for e in entries:
        n, before = e.num_tokens, max(e.context_len - e.num_tokens, 0)
        tokens += n
        keys += n * before + n * (n + 1) // 2  # causal: token i of the chunk sees `before` + i + 1 keys
        kv_read += before
    flops = 2 * tokens * cost.linear_params + 2 * num_sampled * cost.lm_head_params + cost.attention_flops(keys)
    moved = cost.weight_bytes + cost.kv_bytes_per_token * (kv_read + tokens)
    return flops, moved


def step_roofline(cost: ModelCost, ev, peaks=None) -> dict:
    """One StepEvent's roofline numbers (JSON-ready); utilizations, and the peaks they divide by (the live
    view draws the device's roof from them), only with the device's peaks."""
    flops, moved = step_work(cost, ev.entries, len(ev.sampled) + sum(e.drafted for e in ev.entries))
    seconds = max(ev.t_end - ev.t_start, 1e-9)
    out = {"flops": flops, "bytes": moved, "intensity": flops / moved, "flops_per_s": flops / seconds,
           "bytes_per_s": moved / seconds}
    if peaks is not None:
        out["mem_util"] = out["bytes_per_s"] / peaks.bytes_per_s
        out["compute_util"] = out["flops_per_s"] / peaks.flops_per_s
        out["peak_bytes_per_s"], out["peak_flops_per_s"] = peaks.bytes_per_s, peaks.flops_per_s
    return out


def decode_compute_bound_batch(cost: ModelCost, ridge: float, context: int) -> float | None:
    """The batch size from which a decode step (one token per row, each row holding `context` tokens)
    does at least `ridge` FLOPs per byte (the device's peak FLOP/s over its peak bytes/s), i.e. turns
    compute-bound. None when it never does: each row's KV reads grow as fast as its FLOPs."""
    row_flops = 2 * cost.linear_params + 2 * cost.lm_head_params + cost.attention_flops(context + 1)
    row_bytes = cost.kv_bytes_per_token * (context + 1)
    spare = row_flops - ridge * row_bytes  # intensity(B) = B*row_flops / (weights + B*row_bytes)
    return ridge * cost.weight_bytes / spare if spare > 0 else None


def model_summary(cost: ModelCost, peaks=None, contexts=(0, 512, 2048)) -> dict:
    """The model's numbers where people look for them (the KV page, docs/views.md's command)."""
    out = {**asdict(cost), "weight_bytes": cost.weight_bytes}
    if peaks is not None:
        ridge = peaks.flops_per_s / peaks.bytes_per_s
        out["ridge_flops_per_byte"] = ridge
        out["decode_compute_bound_batch"] = {c: decode_compute_bound_batch(cost, ridge, c) for c in contexts}
    return out


@dataclass(frozen=True)
class EngineRoofline:
    """One engine's model costs and its device's peaks (None if they could not be measured)."""
    cost: ModelCost
    peaks: object | None  # engine.telemetry.device_peaks.DevicePeaks

    def step(self, ev) -> dict:
        return step_roofline(self.cost, ev, self.peaks)

    def summary(self) -> dict:
        return {**model_summary(self.cost, self.peaks),
                "peaks": None if self.peaks is None else asdict(self.peaks)}


def engine_roofline(engine) -> EngineRoofline | None:
    """For a loaded LLMEngine; measures the device's peaks on its first use (cached on disk)."""
    from .device_peaks import device_peaks
    runner = engine.runner
    try:
        cost = ModelCost.from_hf_config(runner.hf_config, runner.dtype)
    except (AttributeError, TypeError) as e:  # a config we cannot read: no roofline, the engine still runs
        log.warning("no roofline for %s: %s", runner.model_name, e)
        return None
    try:
        peaks = device_peaks(runner.device, runner.dtype, linear=runner.linear)
    except Exception as e:  # noqa: BLE001 - e.g. out of memory while measuring: numbers without utilization
        log.warning("could not measure the peaks of %s: %s", runner.device, e)
        peaks = None
    return EngineRoofline(cost, peaks)
