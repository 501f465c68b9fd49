"""Does this CPU multiply bf16 natively? bf16 halves the bytes every decode step reads; on matrix units
(AMX, Arm's BF16 matrix multiply) it also multiplies faster, so dtype "auto" picks it there
(engine/config.py dtype_choice). With AVX-512 BF16 alone, oneDNN's bf16 matmuls ran slower than fp32 on
a 2-core Intel Xeon (0.20 against 0.35 TFLOP/s, `python -m engine.bench.decode_floor`): prefill got
slower, decode a little faster, the quick workload 1.08x (docs/benchmark.md), so auto stays fp32 there."""
from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

import torch


BF16_FASTER = ("AMX", "Arm BF16")  # where auto picks bf16


@functools.cache
def native_bf16() -> str | None:
    """What gives this CPU native bf16 ("AMX", "AVX-512 BF16", "Arm BF16"), or None."""
    cpu = getattr(torch, "cpu", None)
    if _asks(cpu, "_is_amx_tile_supported"):
        return "AMX"
    if _asks(cpu, "_is_avx512_bf16_supported"):
        return "AVX-512 BF16"
    if platform.machine().lower() in ("aarch64", "arm64") and _arm_bf16():
        return "Arm BF16"
    return None


def _asks(module, name: str) -> bool:
    fn = getattr(module, name, None)  # private in torch: absent in some versions
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # noqa: BLE001 - a probe that fails means no
        return False


def _arm_bf16() -> bool:
    """Linux lists it among the CPU's features; macOS answers a sysctl."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        return any(line.startswith("Features") and "bf16" in line.split() for line in cpuinfo.read_text().splitlines())
    try:
        out = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "1"
