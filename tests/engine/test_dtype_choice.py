"""dtype "auto": bf16 where the device multiplies it natively on matrix units (a GPU, a CPU with AMX or Arm
BF16), fp32 elsewhere (AVX-512 BF16 alone measured slower: engine/cpu_bf16.py), and it says why."""
from __future__ import annotations

import pytest
import torch

from engine import config as config_mod
from engine.config import EngineConfig, dtype_choice, resolve_dtype
from engine.cpu_bf16 import _asks

CPU = torch.device("cpu")


@pytest.mark.parametrize("native, dtype, why", [
    ("AMX", torch.bfloat16, "auto: bf16, the CPU has AMX"),
    ("AVX-512 BF16", torch.float32, "auto: fp32, the CPU has AVX-512 BF16 but no AMX"),  # measured slower
    ("Arm BF16", torch.bfloat16, "auto: bf16, the CPU has Arm BF16"),
    (None, torch.float32, "auto: fp32, the CPU has no native bf16"),
])
def test_auto_on_the_cpu_follows_its_matrix_units(monkeypatch, native, dtype, why):
    monkeypatch.setattr(config_mod, "native_bf16", lambda: native)
    assert dtype_choice("auto", CPU) == (dtype, why)
    assert resolve_dtype("auto", CPU) == dtype


def test_a_dtype_set_is_kept_and_a_gpu_gets_bf16(monkeypatch):
    monkeypatch.setattr(config_mod, "native_bf16", lambda: None)
    assert dtype_choice("bfloat16", CPU) == (torch.bfloat16, "as set")
    assert dtype_choice("float32", CPU) == (torch.float32, "as set")
    assert dtype_choice("auto", torch.device("cuda")) == (torch.bfloat16, "auto: bf16 on a GPU")


def test_the_default_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("INFLIGHT_DTYPE", "bfloat16")
    assert EngineConfig().dtype == "bfloat16"
    monkeypatch.delenv("INFLIGHT_DTYPE")
    assert EngineConfig().dtype == "auto" and EngineConfig(dtype="float32").dtype == "float32"
    with pytest.raises(ValueError, match="EngineConfig.dtype"):
        EngineConfig(dtype="fp8")


def test_a_probe_that_is_missing_or_fails_means_no():
    class Probes:
        def _is_amx_tile_supported(self):
            raise RuntimeError("no cpuid here")
    assert not _asks(Probes(), "_is_amx_tile_supported") and not _asks(Probes(), "_is_avx512_bf16_supported")
