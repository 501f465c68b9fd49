"""python -m engine.telemetry.roofline_report: a model's roofline numbers on this device, without loading weights.

  python -m engine.telemetry.roofline_report [--model M] [--device cpu|cuda] [--dtype auto|float32|bfloat16]
                                  [--linear auto|torch|onednn] [--remeasure]

Prints the model's weight and KV bytes per token, the device's measured peaks (cached on disk,
engine/telemetry/device_peaks.py) and the batch size from which a decode step turns compute-bound.
"""
from __future__ import annotations

import argparse

from ..config import default_device, default_model, resolve_device, resolve_dtype


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.telemetry.roofline_report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="hub id or local directory (default: $INFLIGHT_MODEL or SmolLM2)")
    ap.add_argument("--device", default=None, help="auto | cpu | cuda (default: $INFLIGHT_DEVICE or auto)")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on GPUs and AMX or Arm BF16 CPUs) | float32 | bfloat16 | float16")
    ap.add_argument("--linear", default="auto", help="the linear backend whose matmul peak to measure (auto: the engine's)")
    ap.add_argument("--remeasure", action="store_true", help="measure the device's peaks again")
    args = ap.parse_args(argv)
    for line in report(args.model or default_model(), args.device or default_device(), args.dtype, args.remeasure,
                       args.linear):
        print(line)
    return 0


def report(model: str, device: str, dtype: str, remeasure: bool = False, linear: str = "auto") -> list[str]:
    from transformers import AutoConfig

    from ..model.files.loader import resolve_model_dir
    from ..model.packed_linear import resolve_linear_backend
    from . import device_peaks as dp
    from .roofline import ModelCost, model_summary

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    cost = ModelCost.from_hf_config(AutoConfig.from_pretrained(resolve_model_dir(model)), torch_dtype)
    linear = resolve_linear_backend(linear, dev, torch_dtype)
    peaks = dp.measure_peaks(dev, torch_dtype, linear) if remeasure else dp.device_peaks(dev, torch_dtype, linear=linear)
    s = model_summary(cost, peaks)
    bound = ", ".join(f"{'-' if b is None else f'{b:.0f}'} at {c} tokens of context"
                      for c, b in s["decode_compute_bound_batch"].items())
    return [f"model {model} ({torch_dtype}): {s['weight_bytes'] / 1e6:.0f} MB of matmul weights, "
            f"KV {s['kv_bytes_per_token'] / 1024:.1f} KiB per token",
            f"device {peaks.device}: {peaks.bytes_per_s / 1e9:.1f} GB/s, {peaks.flops_per_s / 1e9:.1f} GFLOP/s "
            f"(ridge {peaks.ridge:.1f} FLOPs per byte); measured by {peaks.method}",
            f"decode turns compute-bound from a batch of: {bound} ('-': never, KV reads outgrow the FLOPs)"]


if __name__ == "__main__":
    raise SystemExit(main())
