"""Linear layers on the CPU through oneDNN, with weights packed once at load.

PyTorch's CPU `F.linear` calls MKL, which on the AMD CPUs measured here runs a decode step's skinny
matmuls (1-16 rows) far from the memory bandwidth. oneDNN's linear over a weight reordered once into
its blocked layout ran the model's linear layers 1.6x faster at 1 row and 2.1x at 8 (docs/benchmark.md, "Where a
CPU step's time goes"). Packing replaces each `nn.Linear` of the loaded model with a `PackedLinear`
that holds only the packed copy; a weight tied to the embedding is copied (the embedding keeps its own).

Sibling projections that read the same input (an attention block's q/k/v, an MLP's gate/up) are packed
as one matrix (engine/model/fused_linears.py): one matmul instead of three reads the weights as one stream
and pays oneDNN's per-call cost once (decode steps 2-5% faster: docs/benchmark.md, "Where a CPU step's
time goes").

`python -m engine.bench.step_profile --linear torch,onednn` measures both side by side.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from .fused_linears import fuse_siblings

# oneDNN, and ideep (PyTorch's layer over it), each keep a compiled primitive per input shape, 1,024 by
# default: a server sees every prompt length, and over a long run those caches held hundreds of MB with
# more freed-but-kept by glibc around them (docs/room.md, "Where the soak's memory goes"). 128 holds every
# decode batch size of a lane several times over (LRU: the shapes used every step stay); set either
# variable (or oneDNN's older DNNL_PRIMITIVE_CACHE_CAPACITY) to choose. Both are read when the first
# primitive is made, after this import (engine/__init__ imports it through the config).
CACHE_CAPACITY = 128
for _name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    if not (_name.startswith("ONEDNN") and "DNNL_PRIMITIVE_CACHE_CAPACITY" in os.environ):
        os.environ.setdefault(_name, str(CACHE_CAPACITY))

# Rows the packed layout is tuned for (any row count runs); a decode step's batch size.
ROWS_HINT = 16
_DTYPES = (torch.float32, torch.bfloat16)


def onednn_usable(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cpu" or dtype not in _DTYPES or not torch.backends.mkldnn.is_available():
        return False
    # oneDNN refuses bf16 weights on CPUs without AVX-512 (or AVX-NE-CONVERT)
    return dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported()


def resolve_linear_backend(name: str, device: torch.device, dtype: torch.dtype) -> str:
    """EngineConfig.linear_backend -> "torch" or "onednn" (auto: oneDNN wherever it can run)."""
    usable = onednn_usable(device, dtype)
    if name == "auto":
        return "onednn" if usable else "torch"
    if name == "onednn" and not usable:
        raise ValueError(f"EngineConfig.linear_backend='onednn' needs device 'cpu', dtype float32 or bfloat16 "
                         f"(bf16: on a CPU with AVX-512) and a PyTorch built with oneDNN; got device {device.type!r}, dtype "
                         f"{str(dtype).replace('torch.', '')}")
    return name


class PackedLinear(nn.Module):
    """y = x W^T + b with W in oneDNN's packed layout (read-only: engines in several threads share it)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
        self.bias = None if bias is None else bias.detach()

    @classmethod
    def of(cls, linear: nn.Linear) -> PackedLinear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed_weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def pack_linears(model: nn.Module) -> int:
    """Replace every nn.Linear under model with a packed one (siblings fused into one: fuse_siblings);
    returns how many."""
    count = fuse_siblings(model, PackedLinear)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, PackedLinear.of(child))
                count += 1
    return count
