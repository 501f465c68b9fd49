"""EngineConfig: every knob of one engine, validated at construction."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
from dataclasses import dataclass

import torch

from .cpu_bf16 import BF16_FASTER, native_bf16
from .model.packed_linear import resolve_linear_backend
from .untrusted import INT64, is_int, is_number, is_text, shown

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
STRATEGIES = ("continuous", "static", "dynamic")
SCHEDULING_POLICIES = ("fcfs", "priority", "sjf", "fair", "slo")  # engine/scheduler/policy.py
MAX_SLO_S = 3600
DTYPES = ("auto", "float32", "bfloat16", "float16")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
LINEAR_BACKENDS = ("auto", "torch", "onednn")
SPECULATIVE = ("off", "ngram", "draft")  # engine/scheduler/ngram.py, engine/model/draft_model.py
MAX_SPECULATIVE_TOKENS = 8
PREEMPTION_MODES = ("recompute", "swap")  # engine/kv/transfer.py
MAX_SWAP_SPACE_GB = 1024
MAX_MODEL_NAME_CHARS = 1024
BIG = 1 << 40  # far past any machine, and within what every consumer's integers hold


def default_model() -> str:
    return os.environ.get("INFLIGHT_MODEL") or DEFAULT_MODEL


def default_device() -> str:
    return os.environ.get("INFLIGHT_DEVICE") or "auto"


def default_dtype() -> str:
    return os.environ.get("INFLIGHT_DTYPE") or "auto"


@dataclass
class EngineConfig:
    model: str | None = None          # hub id, local dir; None: $INFLIGHT_MODEL or the default
    strategy: str = "continuous"
    scheduling_policy: str = "fcfs"   # in which order requests are served (any strategy)
    device: str | None = None         # "auto" | "cpu" | "cuda" | "cuda:N"; None: $INFLIGHT_DEVICE or auto
    # auto: bf16 on a GPU and on a CPU that multiplies bf16 natively, fp32 elsewhere (dtype_choice);
    # None: $INFLIGHT_DTYPE or auto
    dtype: str | None = None
    # torch: the PyTorch reference (any device); triton: our Triton kernels (CUDA, or CPU under
    # TRITON_INTERPRET=1). auto: triton on CUDA where Triton can run there, else torch; the runner
    # says which ran and why (attention_choice, ModelRunner.backend_why).
    attention_backend: str = "auto"
    # Decode-only steps replayed from CUDA graphs (engine/model/decode_graphs.py); needs the Triton
    # backend. None: on wherever it can run (CUDA with Triton attention).
    cuda_graphs: bool | None = None
    # The decode graphs' forward through torch.compile (fused kernels: far fewer launches a step; compiled
    # when the engine starts). Needs cuda_graphs. None: wherever CUDA graphs are captured (on CUDA).
    torch_compile: bool | None = None
    # Compile every kernel variant the engine can reach before it serves (engine/model/warmup.py).
    # None: wherever kernels are compiled (Triton attention on CUDA).
    warmup: bool | None = None
    # The next step scheduled and launched while the GPU runs this one, its input tokens taken on the
    # device from the step before (LLMEngine.step). None: on CUDA, for continuous batching without
    # speculation, disaggregation or a policy that times or tallies steps (fair, slo).
    overlap: bool | None = None
    # torch: F.linear; onednn: weights packed once for oneDNN (CPU, fp32/bf16; engine/model/packed_linear.py).
    # auto is onednn wherever it can run.
    linear_backend: str = "auto"
    block_size: int = 16
    num_kv_blocks: int | None = None  # None: sized from kv_cache_memory_gb
    kv_cache_memory_gb: float | None = None  # None: 1 GiB on CPU; on GPU 60% of free memory, split among its lanes
    max_model_len: int | None = None  # None: the model's context length
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    enable_chunked_prefill: bool = True
    # Share the KV blocks of prompt prefixes between requests and keep them cached (any strategy).
    enable_prefix_caching: bool = False
    # Speculative decoding: up to num_speculative_tokens draft tokens per decode row, verified in the
    # same forward (any strategy; rows that sample are verified by rejection sampling,
    # engine/model/spec_sampling.py). "ngram" drafts from the request's own prompt and output; "draft"
    # runs speculative_model (a smaller causal LM with the same tokenizer) with its own paged KV.
    speculative: str = "off"
    num_speculative_tokens: int = 4
    speculative_model: str | None = None
    # A preempted request's KV: dropped and recomputed when it resumes, or copied to a host pool of
    # swap_space_gb (on a CPU device, a second pool in the same RAM) and copied back (continuous only:
    # static and dynamic batching never preempt). A full host pool falls back to recompute.
    # Latency SLOs (seconds; None: none): what the "slo" policy schedules for, and what a request meets
    # to count in goodput (engine/telemetry/metrics.py)
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    preemption_mode: str = "recompute"
    swap_space_gb: float = 1.0
    # Prefill on one engine, decode on another (continuous only, engine/disaggregated.py): each half has
    # its own KV pool (half of this config's KV memory), its own thread and half of the lane's cores; a
    # request's blocks are copied from the prefill pool to the decode pool after its first token.
    disaggregated: bool = False
    static_batch_size: int = 16  # the same maximum batch as max_num_seqs: comparisons are at equal capacity
    static_max_wait_s: float = 0.5
    seed: int = 0

    is_remote = False  # a lane of this engine, here (serving/remote: a RemoteConfig is a server elsewhere)

    def __post_init__(self):
        if self.model is None:
            self.model = default_model()
        if self.device is None:
            self.device = default_device()
        if self.dtype is None:
            self.dtype = default_dtype()
        _check(is_text(self.model, MAX_MODEL_NAME_CHARS), "model", self.model, "a hub id or a local directory")
        _check(self.strategy in STRATEGIES, "strategy", self.strategy, f"one of {', '.join(STRATEGIES)}")
        _check(self.scheduling_policy in SCHEDULING_POLICIES, "scheduling_policy", self.scheduling_policy,
               f"one of {', '.join(SCHEDULING_POLICIES)}")
        _check(isinstance(self.device, str) and (self.device in ("auto", "cpu", "cuda")
                                                 or self.device.startswith("cuda:")),
               "device", self.device, "'auto', 'cpu', 'cuda' or 'cuda:N'")
        _check(self.dtype in DTYPES, "dtype", self.dtype, f"one of {', '.join(DTYPES)}")
        _check(self.attention_backend in ATTENTION_BACKENDS, "attention_backend", self.attention_backend,
               f"one of {', '.join(ATTENTION_BACKENDS)}")
        _check(self.cuda_graphs is None or isinstance(self.cuda_graphs, bool), "cuda_graphs", self.cuda_graphs,
               "None, True or False")
        _check(self.torch_compile is None or isinstance(self.torch_compile, bool), "torch_compile",
               self.torch_compile, "None, True or False")
        _check(self.warmup is None or isinstance(self.warmup, bool), "warmup", self.warmup, "None, True or False")
        _check(self.overlap is None or isinstance(self.overlap, bool), "overlap", self.overlap, "None, True or False")
        blocker = self.overlap and overlap_blocker(self)
        _check(not blocker, "overlap", self.overlap, f"None or False with {blocker}")
        _check(self.linear_backend in LINEAR_BACKENDS, "linear_backend", self.linear_backend,
               f"one of {', '.join(LINEAR_BACKENDS)}")
        _check(_count(self.block_size, 1), "block_size", self.block_size, f"an integer from 1 to {BIG}")
        _check(self.num_kv_blocks is None or _count(self.num_kv_blocks, 1),
               "num_kv_blocks", self.num_kv_blocks, f"None or an integer from 1 to {BIG}")
        _check(self.kv_cache_memory_gb is None or (is_number(self.kv_cache_memory_gb)
                                                   and self.kv_cache_memory_gb > 0),
               "kv_cache_memory_gb", self.kv_cache_memory_gb, "None or a number > 0")
        _check(self.max_model_len is None or _count(self.max_model_len, 2),
               "max_model_len", self.max_model_len, f"None or an integer from 2 to {BIG}")
        _check(_count(self.max_num_seqs, 1), "max_num_seqs", self.max_num_seqs, f"an integer from 1 to {BIG}")
        _check(_count(self.max_num_batched_tokens, 1), "max_num_batched_tokens", self.max_num_batched_tokens,
               f"an integer from 1 to {BIG}")
        _check(isinstance(self.enable_chunked_prefill, bool), "enable_chunked_prefill",
               self.enable_chunked_prefill, "True or False")
        _check(isinstance(self.enable_prefix_caching, bool), "enable_prefix_caching",
               self.enable_prefix_caching, "True or False")
        _check(self.speculative in SPECULATIVE, "speculative", self.speculative, f"one of {', '.join(SPECULATIVE)}")
        _check(_count(self.num_speculative_tokens, 1) and self.num_speculative_tokens <= MAX_SPECULATIVE_TOKENS,
               "num_speculative_tokens", self.num_speculative_tokens, f"an integer from 1 to {MAX_SPECULATIVE_TOKENS}")
        drafting = self.speculative == "draft"
        _check(is_text(self.speculative_model, MAX_MODEL_NAME_CHARS) if drafting else self.speculative_model is None,
               "speculative_model", self.speculative_model,
               "a hub id or a local directory (speculative = 'draft')" if drafting
               else "None unless speculative = 'draft'")
        for name in ("slo_ttft_s", "slo_tpot_s"):
            v = getattr(self, name)
            _check(v is None or (is_number(v) and 0 < v <= MAX_SLO_S), name, v,
                   f"None or a number of seconds > 0 and at most {MAX_SLO_S}")
        _check(self.preemption_mode in PREEMPTION_MODES, "preemption_mode", self.preemption_mode,
               f"one of {', '.join(PREEMPTION_MODES)}")
        _check(is_number(self.swap_space_gb) and 0 < self.swap_space_gb <= MAX_SWAP_SPACE_GB, "swap_space_gb",
               self.swap_space_gb, f"a number of GiB > 0 and at most {MAX_SWAP_SPACE_GB}")
        _check(self.disaggregated is False or (self.disaggregated is True and self.strategy == "continuous"),
               "disaggregated", self.disaggregated, "True (with strategy 'continuous') or False")
        _check(_count(self.static_batch_size, 1), "static_batch_size", self.static_batch_size,
               f"an integer from 1 to {BIG}")
        _check(is_number(self.static_max_wait_s) and 0 <= self.static_max_wait_s <= 3600, "static_max_wait_s",
               self.static_max_wait_s, "a number of seconds from 0 to 3600")
        _check(is_int(self.seed) and INT64[0] <= self.seed <= INT64[1], "seed", self.seed, "a 64-bit integer")


def _count(x, low: int) -> bool:
    """An integer from low up to BIG (a bound that no setting reaches, so no arithmetic on it overflows)."""
    return is_int(x) and low <= x <= BIG


def _check(ok: bool, name: str, value, expected: str, owner: str = "EngineConfig") -> None:
    if not ok:
        raise ValueError(f"{owner}.{name} must be {expected}, got {shown(value)}")


# ---- what "auto" means here ----------------------------------------------------------------------
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but CUDA is not available; use device='cpu'")
    return torch.device(name)


def attention_choice(name: str, device: torch.device) -> tuple[str, str]:
    """The attention backend an engine runs, and why (what the status, the benchmark and the page say).
    On CUDA, auto is the Triton kernels unless Triton cannot build them here; the runner may still
    fall back where they cannot run the model (ModelRunner._attention)."""
    if name == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("attention_backend='triton' needs a CUDA device (or TRITON_INTERPRET=1 to run "
                         "the kernels in Triton's CPU interpreter, for tests)")
    if name != "auto":
        return name, "as set"
    if device.type != "cuda":
        return "torch", "auto: the PyTorch reference off a GPU"
    missing = triton_missing()
    if missing:
        return "torch", f"auto: the PyTorch reference, {missing}"
    return "triton", "auto: Triton kernels on a GPU"


def triton_missing() -> str | None:
    """Why Triton cannot build kernels on this machine, or None: it needs its package, a C compiler
    and Python's headers (it compiles a small C launcher for each kernel)."""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    if not (os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")):
        return "Triton finds no C compiler (gcc or clang) to build its kernel launcher"
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return "Triton needs Python's headers (Python.h) to build its kernel launcher"
    return None


def resolve_warmup(flag: bool | None, device: torch.device, backend: str) -> bool:
    """Whether an engine compiles its kernels before it serves: by default where it compiles any."""
    return flag if flag is not None else device.type == "cuda" and backend == "triton"


def resolve_cuda_graphs(flag: bool | None, device: torch.device, backend: str) -> bool:
    """Whether decode steps go through graph buckets: replayed CUDA graphs on CUDA; without CUDA
    (the Triton backend then runs in Triton's interpreter, for tests) the same bucketed forward, eagerly."""
    if flag is None:
        return device.type == "cuda" and backend == "triton"
    if flag and backend != "triton":
        raise ValueError("EngineConfig.cuda_graphs=True needs attention_backend='triton' (the torch reference "
                         "backend sizes its work from host values every step, which a graph cannot replay)")
    return flag


def overlap_blocker(cfg: EngineConfig) -> str | None:
    """What keeps an engine from launching its next step before this one is read back, or None."""
    if cfg.strategy != "continuous":
        return f"strategy {cfg.strategy!r} (a static batch waits for every row)"
    if cfg.speculative != "off":
        return "speculative decoding (a draft is chosen from the tokens before it)"
    if cfg.disaggregated:
        return "a disaggregated lane (its halves hand requests on after each step)"
    if cfg.scheduling_policy in ("fair", "slo"):
        return f"the {cfg.scheduling_policy!r} policy (it tallies or times each step as it ends)"
    return None


def resolve_overlap(cfg: EngineConfig, device: torch.device) -> bool:
    """Whether the engine launches its next step before this one is read back: by default on CUDA where
    nothing keeps it from it (overlap_blocker)."""
    if cfg.overlap is None:
        return device.type == "cuda" and overlap_blocker(cfg) is None
    return cfg.overlap  # (True with a blocker is refused when the config is made)


def resolve_torch_compile(flag: bool | None, device: torch.device, cuda_graphs: bool) -> bool:
    """Whether the decode graphs' forward is compiled: by default where graphs are captured (CUDA)."""
    if flag is None:
        return cuda_graphs and device.type == "cuda"
    if flag and not cuda_graphs:
        raise ValueError("EngineConfig.torch_compile=True compiles the decode graphs' forward: it needs cuda_graphs "
                         "(True, or None on CUDA, with the Triton attention backend)")
    return flag


def dtype_choice(name: str, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype an engine runs in, and why (what the status, the benchmark and the page say)."""
    if name != "auto":
        return getattr(torch, name), "as set"
    if device.type == "cuda":
        return torch.bfloat16, "auto: bf16 on a GPU"
    native = native_bf16()
    if native is None:
        return torch.float32, "auto: fp32, the CPU has no native bf16"
    if native not in BF16_FASTER:
        return torch.float32, f"auto: fp32, the CPU has {native} but no AMX"
    return torch.bfloat16, f"auto: bf16, the CPU has {native}"


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    return dtype_choice(name, device)[0]


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16", as EngineConfig.dtype names it."""
    return str(dtype).removeprefix("torch.")


def same_weights(a: EngineConfig, b: EngineConfig) -> bool:
    """Whether engines of the two configs can share one copy of the weights (weights_key)."""
    try:
        return weights_key(a) == weights_key(b)
    except ValueError:  # a setting this machine cannot run: that engine's own build says why
        return False


def weights_key(cfg: EngineConfig) -> tuple:
    """What loaded weights depend on, resolved (auto -> what it means here): model, device, dtype,
    attention backend (registered on the model) and linear backend (packed or not). Engines with
    the same key can share one copy."""
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    return (cfg.model, device, dtype, attention_choice(cfg.attention_backend, device)[0],
            resolve_linear_backend(cfg.linear_backend, device, dtype))
