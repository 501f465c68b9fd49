"""oneDNN packed linear layers (the CPU default): same results as F.linear, same greedy outputs as
generate(), and torch's path still there to compare with."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM

from engine.config import EngineConfig
from engine.model.fused_linears import FusedLinears, FusedPart
from engine.model.packed_linear import PackedLinear, pack_linears, resolve_linear_backend
from engine_helpers import greedy, make_engine, mixed_prompts
from tiny_models import FAMILIES, reference_greedy

CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch without oneDNN")


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 16, 70])
def test_packed_linear_equals_f_linear(bias, rows):
    torch.manual_seed(rows)
    lin = nn.Linear(96, 80, bias=bias)
    packed = PackedLinear.of(lin)
    x = torch.randn(rows, 96)
    torch.testing.assert_close(packed(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    x3 = torch.randn(1, rows, 96)  # the packed batch's shape
    torch.testing.assert_close(packed(x3), F.linear(x3, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
    xt = torch.randn(96, rows).t()  # not contiguous
    torch.testing.assert_close(packed(xt), F.linear(xt, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)


@needs_onednn
@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no oneDNN bf16 on this CPU")
def test_packed_linear_bfloat16():
    torch.manual_seed(0)
    lin = nn.Linear(64, 48).to(torch.bfloat16)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    out = PackedLinear.of(lin)(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, F.linear(x, lin.weight, lin.bias), rtol=2e-2, atol=2e-2)


@needs_onednn
@pytest.mark.parametrize("biases", [(False, False, False), (True, True, True), (True, False, True)])
def test_fused_siblings_equal_their_own_linears_and_keep_no_activation(biases):
    torch.manual_seed(1)
    linears = [nn.Linear(64, out, bias=b) for out, b in zip((48, 16, 16), biases)]
    group = FusedLinears(linears, PackedLinear)
    parts = [FusedPart(group, i) for i in range(3)]
    for x in (torch.randn(1, 5, 64), torch.randn(1, 1, 64)):
        for part, lin in zip(parts, linears):
            torch.testing.assert_close(part(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
        assert group._local.x is None and group._local.out is None  # dropped once all parts read it
    y = torch.randn(2, 64)  # a part called alone, with a new input, still computes its own slice
    torch.testing.assert_close(parts[2](y), F.linear(y, linears[2].weight, linears[2].bias), rtol=1e-5, atol=1e-5)


def test_backend_choice_and_errors():
    onednn = "onednn" if torch.backends.mkldnn.is_available() else "torch"
    assert resolve_linear_backend("auto", CPU, torch.float32) == onednn
    assert resolve_linear_backend("auto", CPU, torch.float16) == "torch"
    bf16 = onednn if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "torch"
    assert resolve_linear_backend("auto", CPU, torch.bfloat16) == bf16
    assert resolve_linear_backend("auto", torch.device("cuda"), torch.bfloat16) == "torch"
    assert resolve_linear_backend("torch", CPU, torch.float32) == "torch"
    with pytest.raises(ValueError, match="linear_backend='onednn' needs device 'cpu'.*float16"):
        resolve_linear_backend("onednn", CPU, torch.float16)
    with pytest.raises(ValueError, match="EngineConfig.linear_backend must be one of auto, torch, onednn"):
        EngineConfig(linear_backend="mkl")


@needs_onednn
def test_every_linear_is_packed_and_the_tied_embedding_kept(tiny_model_dirs):
    eng = make_engine(tiny_model_dirs["llama"], linear_backend="onednn")
    model = eng.runner.model
    assert not [n for n, m in model.named_modules() if type(m) is nn.Linear]
    assert isinstance(model.lm_head, PackedLinear)
    layer = model.model.layers[0]
    parts = [layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]
    assert all(isinstance(p, FusedPart) and p.group is parts[0].group for p in parts)
    assert layer.mlp.gate_proj.group is layer.mlp.up_proj.group
    assert isinstance(layer.mlp.down_proj, PackedLinear)
    assert model.get_input_embeddings().weight.shape[0] == eng.runner.vocab_size
    assert pack_linears(model) == 0  # nothing left to pack


@needs_onednn
def test_packing_frees_the_unpacked_weights_without_a_collection(tiny_model_dirs):
    """Loading trims malloc after packing but runs no garbage collection (engine/model/runner.py): that
    holds only if reference counting alone frees every replaced weight (none is kept in a cycle)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["llama"], dtype=torch.float32)
    tied = model.get_input_embeddings().weight
    weights = [weakref.ref(m.weight) for m in model.modules() if type(m) is nn.Linear and m.weight is not tied]
    gc.disable()
    try:
        pack_linears(model)
        assert weights and [w for w in weights if w() is not None] == []
    finally:
        gc.enable()


@needs_onednn
@pytest.mark.parametrize("family", FAMILIES)
def test_both_backends_match_generate(tiny_model_dirs, family):
    prompts, max_tokens = mixed_prompts(6)
    ref = reference_greedy(tiny_model_dirs[family], prompts, max_tokens)
    for backend in ("torch", "onednn"):
        eng = make_engine(tiny_model_dirs[family], linear_backend=backend, max_num_batched_tokens=16)
        assert eng.runner.linear == backend
        outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
        assert [o.output_token_ids for o in outs] == ref, f"{family}, {backend} linear layers"


@needs_onednn
def test_engines_share_packed_weights_only_with_the_same_backend(tiny_model_dirs):
    from engine.llm_engine import LLMEngine
    first = make_engine(tiny_model_dirs["qwen2"], linear_backend="onednn")
    same = LLMEngine(EngineConfig(**{**first.cfg.__dict__, "strategy": "static"}), share_weights_with=first)
    other = LLMEngine(EngineConfig(**{**first.cfg.__dict__, "linear_backend": "torch"}), share_weights_with=first)
    assert same.runner.model is first.runner.model
    assert other.runner.model is not first.runner.model
    assert isinstance(other.runner.model.lm_head, nn.Linear)


@needs_onednn
def test_lanes_asking_auto_and_onednn_share_one_copy_on_the_cpu(tiny_model_dirs):
    """auto means onednn here: the service compares resolved settings, so the second lane reuses the
    first lane's packed weights instead of loading and packing them again."""
    from engine.serving.service import EngineService
    base = EngineConfig(model=str(tiny_model_dirs["qwen2"]), device="cpu", num_kv_blocks=32, max_model_len=64)
    svc = EngineService(base, lanes={"auto": base, "onednn": EngineConfig(**{**base.__dict__,
                                                                             "linear_backend": "onednn"})})
    try:
        svc.wait_ready(120)
        a, b = (svc.workers[n].engine.runner for n in ("auto", "onednn"))
        assert a.linear == b.linear == "onednn" and a.model is b.model
    finally:
        svc.stop()



@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt2"])  # (GPT-2's q/k/v are one c_attn already)
def test_torch_linears_fuse_siblings_too(tiny_model_dirs, family):
    """On torch's linear backend (every GPU) siblings run as one matmul as well: five matmuls a layer become
    two, and no nn.Linear is left where a layer calls q/k/v or gate/up."""
    from engine.model.fused_linears import TorchLinear
    eng = make_engine(tiny_model_dirs[family], linear_backend="torch")
    layer = eng.runner.model.model.layers[0]
    groups = {p.group for p in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)}
    assert len(groups) == 1 and isinstance(groups.pop().linear, TorchLinear)
    assert layer.mlp.gate_proj.group is layer.mlp.up_proj.group
    assert type(layer.self_attn.o_proj) is nn.Linear and type(layer.mlp.down_proj) is nn.Linear


def test_traced_by_torch_compile_the_siblings_are_one_matmul_and_one_graph():
    """Inside torch.compile's trace the parts share one matmul (the graph holds one linear for three
    projections) with no graph break, and a second call runs the same graph (no recompile)."""
    from engine.model.fused_linears import TorchLinear
    torch.manual_seed(2)
    linears = [nn.Linear(32, out, bias=b) for out, b in ((24, True), (8, False), (8, True))]
    group = FusedLinears(linears, TorchLinear)
    parts = [FusedPart(group, i) for i in range(3)]
    graphs = []

    def backend(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    run = torch.compile(lambda x: [p(x) for p in parts], backend=backend, dynamic=True)
    for rows in (3, 5):
        x = torch.randn(rows, 32)
        for got, lin in zip(run(x), linears):
            torch.testing.assert_close(got, F.linear(x, lin.weight, lin.bias))
    assert len(graphs) == 1 and group._traced.x is None and group._traced.out is None  # no activation kept
    calls = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert calls.count(F.linear) == 1


def test_siblings_on_other_inputs_or_other_threads_each_get_their_own():
    """A sibling called with another tensor than the first one's (a model that feeds them different inputs)
    is computed on its own and drops what was kept; engines in two threads, interleaved layer by layer on
    one shared model, each read their own output."""
    import threading

    from engine.model.fused_linears import TorchLinear
    torch.manual_seed(3)
    linears = [nn.Linear(16, out) for out in (12, 4, 4)]
    group = FusedLinears(linears, TorchLinear)
    parts = [FusedPart(group, i) for i in range(3)]

    def want(i, x):
        return F.linear(x, linears[i].weight, linears[i].bias)
    x, y = torch.randn(2, 16), torch.randn(3, 16)
    torch.testing.assert_close(parts[0](x), want(0, x))
    torch.testing.assert_close(parts[1](y), want(1, y))  # another input: alone
    assert group._local.x is None and group._local.out is None
    torch.testing.assert_close(parts[2](x), want(2, x))
    first, other_done, got = threading.Event(), threading.Event(), {}

    def other():
        got[0] = parts[0](y)
        first.set()
        other_done.wait(10)
        got[1], got[2] = parts[1](y), parts[2](y)
    t = threading.Thread(target=other)
    t.start()
    first.wait(10)
    mine = [p(x) for p in parts]  # this thread's whole layer between the other's first and second sibling
    other_done.set()
    t.join(10)
    for i in range(3):
        torch.testing.assert_close(mine[i], want(i, x))
        torch.testing.assert_close(got[i], want(i, y))


def test_fused_weights_are_the_models_own_parameters(tiny_model_dirs):
    eng = make_engine(tiny_model_dirs["qwen2"], linear_backend="torch")
    attn = eng.runner.model.model.layers[0].self_attn
    fused = attn.q_proj.group.linear
    params = {id(p) for p in eng.runner.model.parameters()}
    assert id(fused.weight) in params and id(fused.bias) in params  # (qwen2's q/k/v have biases)
    assert fused.weight.shape[0] == attn.q_proj.out_features + attn.k_proj.out_features + attn.v_proj.out_features
