"""Where recent iterations sit under the roof, per lane (from the `roofline` field of each step event), and
the loaded model's and the device's numbers in words: what the KV cache page's roofline panel shows."""
from __future__ import annotations

from collections import deque

from ..event_hub import HubReader

KEEP_STEPS = 300  # per lane


class RooflineWindow(HubReader):
    """The latest steps' roofline numbers per lane, read from the hub."""

    def __init__(self):
        super().__init__()
        self.steps: dict[str, deque] = {}

    def on_step(self, msg) -> None:
        if msg.roofline:
            self.steps.setdefault(msg.lane, deque(maxlen=KEEP_STEPS)).append(msg.roofline)

    def table(self) -> list[dict]:
        return [_row(lane, list(d)) for lane, d in self.steps.items() if d]


def _row(lane: str, steps: list[dict]) -> dict:
    def mean(key):
        vals = [s[key] for s in steps if key in s]
        return sum(vals) / len(vals) if vals else None

    def shown(key, scale=1.0):  # '–' where the steps carry no such number (the device's peaks unmeasured)
        m = mean(key)
        return "–" if m is None else f"{m * scale:,.1f}"

    return {"lane": lane, "iterations": len(steps), "memory bandwidth used %": shown("mem_util", 100),
            "compute used %": shown("compute_util", 100), "FLOPs per byte": shown("intensity"),
            "GB/s": shown("bytes_per_s", 1e-9), "GFLOP/s": shown("flops_per_s", 1e-9)}


def model_lines(summary: dict) -> str:
    """The model's and the device's numbers, as markdown (numbers only: no user text)."""
    lines = [f"- Matmul weights read once per iteration: **{summary['weight_bytes'] / 1e6:.0f} MB**; "
             f"KV cache: **{summary['kv_bytes_per_token'] / 1024:.1f} KiB per token**."]
    p = summary.get("peaks")
    if p is None:
        return "\n".join(lines + ["- The device's peaks could not be measured: no utilization."])
    bound = ", ".join(f"{'never' if b is None else f'{b:.0f} rows'} at {c} tokens of context"
                      for c, b in summary["decode_compute_bound_batch"].items())
    lines += [f"- Device ({p['device']}): **{p['bytes_per_s'] / 1e9:.1f} GB/s** and "
              f"**{p['flops_per_s'] / 1e9:.1f} GFLOP/s** measured; the ridge is "
              f"**{summary['ridge_flops_per_byte']:.1f} FLOPs per byte**.",
              f"- A decode step turns compute-bound from a batch of {bound}.",
              f"- Measured by a {p['method']}."]
    return "\n".join(lines)
