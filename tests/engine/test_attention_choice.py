"""attention_backend "auto": our Triton kernels on a GPU where Triton can build and run them there, the
PyTorch reference elsewhere, and it always says why (the lane's status, the benchmark's JSON)."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch

from engine import config as config_mod
from engine.config import EngineConfig, attention_choice, resolve_warmup
from engine.model.runner import ModelRunner

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def test_auto_is_triton_on_a_gpu_and_the_reference_elsewhere(monkeypatch):
    monkeypatch.setattr(config_mod, "triton_missing", lambda: None)
    assert attention_choice("auto", GPU) == ("triton", "auto: Triton kernels on a GPU")
    assert attention_choice("auto", CPU) == ("torch", "auto: the PyTorch reference off a GPU")
    assert attention_choice("torch", GPU) == ("torch", "as set")


@pytest.mark.parametrize("what, why", [
    ("package", "Triton is not installed"),
    ("compiler", "Triton finds no C compiler (gcc or clang) to build its kernel launcher"),
    ("headers", "Triton needs Python's headers (Python.h) to build its kernel launcher"),
])
def test_where_triton_cannot_build_auto_says_why(monkeypatch, what, why):
    monkeypatch.delenv("CC", raising=False)
    if what == "package":
        monkeypatch.setattr(config_mod.importlib.util, "find_spec", lambda name: None)
    elif what == "compiler":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    else:
        monkeypatch.setattr(config_mod.sysconfig, "get_paths", lambda: {"include": "/nonexistent"})
    assert attention_choice("auto", GPU) == ("torch", f"auto: the PyTorch reference, {why}")


def test_triton_off_a_gpu_needs_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="attention_backend='triton' needs a CUDA device"):
        attention_choice("triton", CPU)


@pytest.mark.parametrize("problem", [None, "head size 512 is beyond the Triton kernel's 256"])
def test_the_runner_falls_back_where_the_kernels_cannot_serve_the_model(monkeypatch, problem):
    """On auto, a model the kernels cannot run (or a GPU where they fail their probe) gets the reference,
    and the reason; a backend set explicitly is never second-guessed."""
    from engine.model import triton_attention
    monkeypatch.setattr(config_mod, "triton_missing", lambda: None)
    monkeypatch.setattr(triton_attention, "cannot_run", lambda *a: problem)
    runner = SimpleNamespace(device=GPU, dtype=torch.bfloat16)
    hf = SimpleNamespace(num_attention_heads=8, num_key_value_heads=2, hidden_size=512, head_dim=64,
                         num_hidden_layers=2)
    got = ModelRunner._attention(runner, EngineConfig(attention_backend="auto"), hf)
    assert got == (("triton", "auto: Triton kernels on a GPU") if problem is None
                   else ("torch", f"auto: the PyTorch reference, {problem}"))
    assert ModelRunner._attention(runner, EngineConfig(attention_backend="triton"), hf) == ("triton", "as set")


def test_cannot_run_refuses_head_sizes_beyond_the_kernel():
    from engine.model.triton_attention import MAX_HEAD_DIM, cannot_run
    assert cannot_run(8, 2, MAX_HEAD_DIM + 1, torch.float32, CPU) == \
        f"head size {MAX_HEAD_DIM + 1} is beyond the Triton kernel's {MAX_HEAD_DIM}"


def test_warmup_defaults_to_where_kernels_compile():
    assert resolve_warmup(None, GPU, "triton") and not resolve_warmup(None, GPU, "torch")
    assert not resolve_warmup(None, CPU, "triton") and resolve_warmup(True, CPU, "torch")
    assert not resolve_warmup(False, GPU, "triton")
    with pytest.raises(ValueError, match="EngineConfig.warmup must be None, True or False"):
        EngineConfig(warmup="yes")


def test_a_cpu_engine_says_which_attention_ran_and_why(tiny_llama_dir):
    from engine_helpers import make_engine
    eng = make_engine(tiny_llama_dir)
    assert (eng.runner.backend, eng.runner.backend_why) == ("torch", "auto: the PyTorch reference off a GPU")
    assert eng.warmup is None and eng.kernel_compiles == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_auto_is_the_fast_path_warm_before_the_first_request(tiny_model_dirs):
    """What `streamlit run app.py` gets on a GPU: Triton attention, CUDA graphs, a warm-up; then serving
    compiles nothing and its greedy outputs are generate()'s."""
    from engine_helpers import greedy, make_engine, mixed_prompts
    from tiny_models import reference_greedy
    eng = make_engine(tiny_model_dirs["qwen2"], device="cuda", dtype="float32", max_num_batched_tokens=16)
    assert (eng.runner.backend, eng.runner.backend_why) == ("triton", "auto: Triton kernels on a GPU")
    assert eng.runner.graphs_state().startswith("on, compiled in ") and eng.warmup is not None and eng.warmup.batches[0] == "decode row"
    prompts, max_tokens = mixed_prompts(6)
    outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["qwen2"], prompts, max_tokens)
    assert eng.kernel_compiles == 0
