"""Sibling linear layers run as one matmul: an attention block's q/k/v, an MLP's gate/up.

Hugging Face's layers call each projection on the same input, so a decode step runs five matmuls a layer
where two would do. Fused, the weights are read as one stream and each matmul's fixed cost is paid once: on
a CPU oneDNN's per-call cost (engine/model/packed_linear.py), on a GPU a kernel's minimum duration, which a
step replayed from a CUDA graph still pays for every kernel (at one row most of a step: docs/PERFORMANCE.md).
The layers' own code is untouched: each projection's module is replaced by a part of the fused one.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

import torch
from torch import nn

# children of one module that Hugging Face models call on the same input, in call order
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class TorchLinear(nn.Module):
    """y = x W^T + b (F.linear): a fused weight where the linear backend is torch's."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


class FusedLinears:
    """Sibling linears run as one matmul: the first sibling computes all of them for its input; the others,
    called with that same tensor object, take their slice of that output, which is dropped once every part
    has read it (no activation outlives its layer). A sibling called with another input (a model that feeds
    them different tensors) is computed on its own, and drops what was kept. Run eagerly, the output is
    kept per thread (engines in several threads share the model); inside torch.compile's trace, as a plain
    attribute (the trace runs no thread, and a thread-local would break the graph in two), which only traced
    code reads."""

    def __init__(self, linears: list[nn.Linear], make: Callable[..., nn.Module]):
        """make(weight, bias): the module that runs the fused matmul (PackedLinear, TorchLinear)."""
        weight = torch.cat([lin.weight.detach() for lin in linears])
        bias = None
        if any(lin.bias is not None for lin in linears):
            bias = torch.cat([lin.bias.detach() if lin.bias is not None
                              else lin.weight.new_zeros(lin.out_features) for lin in linears])
        self.linear = make(weight, bias)
        ends = torch.tensor([lin.out_features for lin in linears]).cumsum(0).tolist()
        self.bounds = list(zip([0] + ends[:-1], ends))
        self._local = threading.local()
        self._traced = _Stash()

    def part(self, i: int, x: torch.Tensor) -> torch.Tensor:
        st = self._traced if torch.compiler.is_dynamo_compiling() else self._local
        a, b = self.bounds[i]
        if getattr(st, "x", None) is not x:
            if i:  # not the first sibling's input: this part alone, nothing kept
                st.x = st.out = None
                return self.linear(x)[..., a:b]
            st.x, st.out, st.unread = x, self.linear(x), len(self.bounds)
        out = st.out[..., a:b]
        st.unread -= 1
        if st.unread == 0:
            st.x = st.out = None
        return out


class _Stash:
    """The traced output's holder: its fields are set from the start, and end each trace as they began
    (None), so the guards the trace leaves on them hold for the next call (no recompile)."""

    def __init__(self):
        self.x = self.out = None
        self.unread = 0


class FusedPart(nn.Module):
    """One sibling of a FusedLinears, standing where its nn.Linear stood."""

    def __init__(self, group: FusedLinears, i: int):
        super().__init__()
        self.group, self.i = group, i
        a, b = group.bounds[i]
        self.in_features, self.out_features = group.linear.in_features, b - a
        if i == 0:  # the fused weights, once among the model's modules (parameters(), to(), state_dict())
            self.fused = group.linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.part(self.i, x)

    def extra_repr(self) -> str:
        return f"part {self.i} of {len(self.group.bounds)}: out_features={self.out_features}"


def fuse_siblings(model: nn.Module, make: Callable[..., nn.Module] = TorchLinear) -> int:
    """Replace each group of sibling nn.Linears under model (same input size and dtype) by the parts of one
    fused linear that make(weight, bias) builds; returns how many linears were replaced."""
    count = 0
    for parent in list(model.modules()):
        for names in SIBLINGS:
            linears = [getattr(parent, n, None) for n in names]
            if not all(type(lin) is nn.Linear for lin in linears):
                continue
            if len({lin.in_features for lin in linears}) > 1 or len({lin.weight.dtype for lin in linears}) > 1:
                continue
            group = FusedLinears(linears, make)
            for i, n in enumerate(names):
                setattr(parent, n, FusedPart(group, i))
            count += len(names)
    return count
