"""Triton KV-write and paged-attention kernels against a dense float64 reference.

Without CUDA the kernels run on CPU under the Triton interpreter, which triton picks when it is
first imported with TRITON_INTERPRET=1. This module sets the variable at collection time. Where
triton was imported before that (transformers imports it when a model loads; so would engine
code importing these kernels at module level), the kernel tests skip here and
test_kernels_in_interpreter reruns this module in a child process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

_CUDA = torch.cuda.is_available()
if not _CUDA and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from engine.model import attention  # noqa: E402
from engine.model.triton_attention import PagedAttnInputs, paged_attention_triton, write_kv_triton  # noqa: E402
from engine.model.triton_hf import paged_attention_hf  # noqa: E402
from repo_paths import ROOT  # noqa: E402

_INTERPRETING = type(triton.language.standard.zeros).__name__ == "InterpretedFunction"
_CHILD_ENV = "INFLIGHT_TRITON_TEST_CHILD"
DEVICE = "cuda" if _CUDA else "cpu"
kernels = pytest.mark.skipif(not (_CUDA or _INTERPRETING),
                             reason="triton was imported without TRITON_INTERPRET=1: "
                                    "test_kernels_in_interpreter runs these in a child process")
TOL = {torch.float32: 2e-4, torch.float16: 3e-3, torch.bfloat16: 2.5e-2}


def test_kernels_in_interpreter():
    if _CUDA or _INTERPRETING:
        pytest.skip("kernels run in this process")
    assert not os.environ.get(_CHILD_ENV), "child process is not interpreting"
    repo = ROOT
    env = {**os.environ, "TRITON_INTERPRET": "1", _CHILD_ENV: "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


def test_kernels_compile_for_gpu():
    """The GPU variant (pipelined `for` loop, no interpreter workarounds) compiles to sm_90 and
    sm_80 cubins with the ptxas bundled in the triton wheel; no GPU needed."""
    if _CUDA or os.environ.get(_CHILD_ENV):
        pytest.skip("the kernel tests launch on the GPU" if _CUDA else "the parent process runs it")
    repo = ROOT
    here = Path(__file__).resolve().parent
    env = {**os.environ, "TRITON_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join(map(str, (repo, repo / "tests", here)))}
    cmd = [sys.executable, "-c", "import test_triton_attention as t; t._compile_for_gpu()"]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


_TRITON_TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                 torch.int32: "i32", torch.int64: "i64"}


def _compile_like_launch(kernel, args, consts, arch, num_warps):
    """triton.compile with the specialisation a launch would get: 16-byte aligned pointers and
    ints divisible by 16 are marked so, ints equal to 1 become constants (but the kernel's
    do_not_specialize arguments)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    consts, sig, attrs = dict(consts), {}, {}
    free = set(kernel.do_not_specialize)
    for i, (name, value) in enumerate(zip(kernel.arg_names, args)):
        if isinstance(value, torch.Tensor):
            sig[name] = "*" + _TRITON_TYPES[value.dtype]
            aligned = value.data_ptr() % 16 == 0
        elif isinstance(value, int) and value == 1 and name not in free:
            sig[name], consts[name], aligned = "constexpr", 1, False
        elif isinstance(value, int):
            sig[name], aligned = "i32" if abs(value) < 2**31 else "i64", value % 16 == 0 and name not in free
        else:
            sig[name], aligned = "fp32", False
        if aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    sig.update({name: "constexpr" for name in consts})
    src = ASTSource(kernel, sig, consts, attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})


def _compile_for_gpu():
    """Run in a process where triton is not interpreting (see test_kernels_compile_for_gpu)."""
    from engine.model import triton_attention as ta
    assert not ta._interpreting()
    cases = [(torch.bfloat16, MIXED, 4, 16, 64, 90), (torch.float16, [(1, 9)] * 3, 7, 7, 128, 90),
             (torch.float32, MIXED, 1, 32, 80, 90), (torch.bfloat16, MIXED, 2, 16, 256, 80),
             # decode buckets of the GPU figures' shapes: Qwen2.5-0.5B (GQA 7, head 64), Qwen3-0.6B (2, 128)
             (torch.bfloat16, [(1, 40)] * 256, 7, 16, 64, 90), (torch.bfloat16, [(1, 40)] * 24, 2, 16, 128, 90)]
    for dtype, seqs, group, block_size, head_dim, arch in cases:
        batch = _make_batch(seqs, block_size=block_size, kv_heads=2, group=group, head_dim=head_dim, dtype=dtype)
        out = torch.empty_like(batch["query"])
        _, args, consts = ta._attention_launch(batch["query"], batch["k_pool"], batch["v_pool"], out,
                                               _inputs(batch), 0.1, None, None)
        kernel = _compile_like_launch(ta._paged_attn_kernel, args, consts, arch, ta._num_warps(dtype, head_dim))
        assert kernel.asm["cubin"]
    k, pool = batch["k_new"], batch["k_pool"]
    args = (k, k, pool, pool, batch["slots"], *k.stride(), *k.stride(), *pool.stride())
    consts = dict(KV_HEADS=2, HEADS_PAD=2, BLOCK_SIZE=block_size, HEAD_DIM=head_dim,
                  BLOCK_D=triton.next_power_of_2(head_dim))
    assert _compile_like_launch(ta._write_kv_kernel, args, consts, 90, 4).asm["cubin"]


# --- a packed batch over a paged pool, and the dense reference ---------------------------------

def _make_batch(seqs, *, block_size, kv_heads, group, head_dim, dtype, pads=None, seed=0):
    """seqs: [(query_len, context_len)]. pads[i] padding tokens go before sequence i (one more
    entry: trailing padding). Returns a dict with the packed query, new K/V, a NaN-filled pool
    holding each sequence's earlier context on shuffled blocks, and the per-sequence truth."""
    g = torch.Generator().manual_seed(seed)
    pads = pads or [0] * (len(seqs) + 1)
    heads = kv_heads * group
    nblocks = [-(-ctx // block_size) for _, ctx in seqs]
    perm = torch.randperm(sum(nblocks) + 3, generator=g)  # spare blocks stay NaN
    pool_shape = (perm.numel(), block_size, kv_heads, head_dim)
    k_pool = torch.full(pool_shape, float("nan"), dtype=dtype)
    v_pool = torch.full(pool_shape, float("nan"), dtype=dtype)
    T = sum(q for q, _ in seqs) + sum(pads)
    query = torch.randn(T, heads, head_dim, generator=g).to(dtype)
    k_new = torch.randn(T, kv_heads, head_dim, generator=g).to(dtype)
    v_new = torch.randn(T, kv_heads, head_dim, generator=g).to(dtype)
    slots = torch.full((T,), -1, dtype=torch.long)
    truth, t, b = [], 0, 0
    for (q_len, ctx), pad, nb in zip(seqs, pads, nblocks):
        t += pad
        blocks = perm[b:b + nb]
        b += nb
        flat = (blocks[:, None] * block_size + torch.arange(block_size)).flatten()[:ctx]
        k = torch.randn(ctx, kv_heads, head_dim, generator=g).to(dtype)
        v = torch.randn(ctx, kv_heads, head_dim, generator=g).to(dtype)
        old = ctx - q_len
        k[old:], v[old:] = k_new[t:t + q_len], v_new[t:t + q_len]
        k_pool.view(-1, kv_heads, head_dim)[flat[:old]] = k[:old]
        v_pool.view(-1, kv_heads, head_dim)[flat[:old]] = v[:old]
        slots[t:t + q_len] = flat[old:]
        truth.append(dict(start=t, q_len=q_len, ctx=ctx, blocks=blocks, k=k, v=v))
        t += q_len
    return dict(query=query, k_new=k_new, v_new=v_new, k_pool=k_pool, v_pool=v_pool, slots=slots,
                truth=truth, block_size=block_size)


def _inputs(batch) -> PagedAttnInputs:
    tr = batch["truth"]
    width = max(s["blocks"].numel() for s in tr)
    tables = torch.zeros(len(tr), width, dtype=torch.int32)
    for i, s in enumerate(tr):
        tables[i, :s["blocks"].numel()] = s["blocks"]
    col = lambda key: torch.tensor([s[key] for s in tr], dtype=torch.int32, device=DEVICE)  # noqa: E731
    return PagedAttnInputs(col("start"), col("q_len"), col("ctx"), tables.to(DEVICE),
                           batch["slots"].to(DEVICE), max_query_len=max(s["q_len"] for s in tr))


def _reference(batch, scale, window=None):
    """Per-sequence dense attention in float64 over the true K/V."""
    query = batch["query"].double()
    out = torch.zeros_like(query)
    group = query.shape[1] // batch["k_new"].shape[1]
    for s in batch["truth"]:
        q = query[s["start"]:s["start"] + s["q_len"]]
        k = s["k"].double().repeat_interleave(group, dim=1)
        v = s["v"].double().repeat_interleave(group, dim=1)
        pos = torch.arange(s["ctx"] - s["q_len"], s["ctx"])[:, None]
        j = torch.arange(s["ctx"])[None, :]
        mask = j <= pos
        if window:
            mask &= j > pos - window
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        p = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out[s["start"]:s["start"] + s["q_len"]] = torch.einsum("hqk,khd->qhd", p, v)
    return out


def _run(batch, scale, window=None, block_n=16):
    dev = lambda x: x.to(DEVICE)  # noqa: E731
    k_pool, v_pool = dev(batch["k_pool"]), dev(batch["v_pool"])
    inputs = _inputs(batch)
    write_kv_triton(dev(batch["k_new"]), dev(batch["v_new"]), k_pool, v_pool, inputs.slot_mapping)
    out = paged_attention_triton(dev(batch["query"]), k_pool, v_pool, inputs, scale,
                                 sliding_window=window, block_n=block_n)
    return out.cpu()


def _check(batch, window=None, block_n=16):
    scale = batch["query"].shape[-1] ** -0.5
    out = _run(batch, scale, window, block_n)
    ref = _reference(batch, scale, window)
    tol = TOL[batch["query"].dtype]
    assert out.dtype == batch["query"].dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)
    in_seq = torch.zeros(out.shape[0], dtype=torch.bool)
    for s in batch["truth"]:
        in_seq[s["start"]:s["start"] + s["q_len"]] = True
    assert (out[~in_seq] == 0).all()  # padding tokens


# --- tests ----------------------------------------------------------------------------------------

# A first prefill chunk, a chunk with earlier context, decodes at block edges, padding in between.
MIXED = [(20, 20), (1, 1), (9, 40), (1, 17), (1, 33)]
MIXED_PADS = [2, 0, 3, 0, 0, 2]


@kernels
@pytest.mark.parametrize("block_size,group,dtype", [
    (1, 1, torch.float32), (4, 2, torch.float16), (7, 7, torch.bfloat16),
    (16, 4, torch.float32), (32, 2, torch.bfloat16), (16, 1, torch.float16)])
def test_mixed_batch(block_size, group, dtype):
    batch = _make_batch(MIXED, pads=MIXED_PADS, block_size=block_size, kv_heads=2, group=group,
                        head_dim=32, dtype=dtype)
    _check(batch)


@kernels
@pytest.mark.parametrize("window", [1, 5, 24])
def test_sliding_window(window):
    batch = _make_batch([(12, 30), (1, 45), (16, 16)], block_size=4, kv_heads=1, group=4,
                        head_dim=16, dtype=torch.float32, seed=1)
    _check(batch, window=window)


@kernels
def test_decode_only_odd_head_dim():
    batch = _make_batch([(1, 5), (1, 64), (1, 1), (1, 23)], pads=[0, 1, 0, 0, 0], block_size=16,
                        kv_heads=3, group=2, head_dim=24, dtype=torch.float16, seed=2)
    _check(batch)


@kernels
def test_write_kv_skips_negative_slots():
    T, kv_heads, head_dim, block_size = 6, 2, 8, 4
    k_pool = torch.zeros(5, block_size, kv_heads, head_dim, device=DEVICE)
    v_pool = torch.zeros_like(k_pool)
    k = torch.randn(T, kv_heads, head_dim, device=DEVICE)
    v = torch.randn(T, kv_heads, head_dim, device=DEVICE)
    slots = torch.tensor([13, -1, 2, 19, -1, 0], device=DEVICE)
    write_kv_triton(k, v, k_pool, v_pool, slots)
    keep = slots >= 0
    want_k = torch.zeros(20, kv_heads, head_dim, device=DEVICE).index_copy_(0, slots[keep], k[keep])
    want_v = torch.zeros(20, kv_heads, head_dim, device=DEVICE).index_copy_(0, slots[keep], v[keep])
    assert torch.equal(k_pool.view(20, kv_heads, head_dim), want_k)
    assert torch.equal(v_pool.view(20, kv_heads, head_dim), want_v)


@kernels
def test_hf_adapter_matches_engine_reference():
    """paged_attention_hf over a real BatchMeta gives what attention.paged_attention gives."""
    batch = _make_batch(MIXED, pads=MIXED_PADS, block_size=4, kv_heads=2, group=2, head_dim=16,
                        dtype=torch.float32, seed=3)
    tr = batch["truth"]
    dev = lambda x: x.to(DEVICE)  # noqa: E731
    decodes = [s for s in tr if s["q_len"] == 1]
    width = max(s["blocks"].numel() for s in decodes)
    written = batch["slots"] >= 0

    def meta(pool):
        return attention.BatchMeta(
            pool=pool, num_tokens=batch["query"].shape[0],
            write_idx=dev(written.nonzero()[:, 0]), write_slots=dev(batch["slots"][written]),
            decode_idx=dev(torch.tensor([s["start"] for s in decodes])),
            decode_blocks=dev(torch.stack([torch.nn.functional.pad(s["blocks"], (0, width - s["blocks"].numel()))
                                           for s in decodes])),
            decode_ctx=dev(torch.tensor([s["ctx"] for s in decodes])),
            prefills=[attention.PrefillSeq(s["start"], s["start"] + s["q_len"], s["ctx"], dev(s["blocks"]))
                      for s in tr if s["q_len"] > 1])

    def pool():
        k = torch.nan_to_num(batch["k_pool"], nan=0.0)  # the engine's pools are zero-initialised
        return SimpleNamespace(k=[dev(k)], v=[dev(torch.nan_to_num(batch["v_pool"], nan=0.0))],
                               block_size=batch["block_size"])

    module = SimpleNamespace(layer_idx=0)
    args = (dev(batch["query"].transpose(0, 1)[None]), dev(batch["k_new"].transpose(0, 1)[None]),
            dev(batch["v_new"].transpose(0, 1)[None]), None)
    got_pool, want_pool = pool(), pool()
    got, _ = paged_attention_hf(module, *args, scaling=0.3, sliding_window=6,
                                **{attention.META_KWARG: meta(got_pool)})
    want, _ = attention.paged_attention(module, *args, scaling=0.3, sliding_window=6,
                                        **{attention.META_KWARG: meta(want_pool)})
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    assert torch.equal(got_pool.k[0], want_pool.k[0]) and torch.equal(got_pool.v[0], want_pool.v[0])


@kernels
@pytest.mark.parametrize("strategy", ["continuous", "static"])
def test_engine_greedy_matches_generate_on_triton_backend(tiny_model_dirs, strategy):
    """The whole engine on the Triton kernels: mixed prefill chunks, decodes, padding, preemption."""
    from engine_helpers import check_drained, greedy, make_engine, mixed_prompts
    from tiny_models import reference_greedy
    prompts, max_tokens = mixed_prompts(6)
    max_tokens = [min(m, 6) for m in max_tokens]
    refs = reference_greedy(tiny_model_dirs["qwen3"], prompts, max_tokens)
    eng = make_engine(tiny_model_dirs["qwen3"], strategy=strategy, attention_backend="triton", device=DEVICE,
                      num_kv_blocks=20, max_model_len=64, max_num_batched_tokens=16)
    outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == refs
    check_drained(eng)


# --- the warm-up: every kernel variant compiled before the engine serves (engine/model/warmup.py) ---

@kernels
@pytest.mark.parametrize("lane", ["continuous", "static", "draft model"])
def test_a_warm_engine_compiles_nothing_while_it_serves(tiny_model_dirs, tiny_draft_dirs, lane):
    """Under the interpreter every launch is keyed as Triton's JIT keys its cache (kernel_variants.py),
    from a process that compiled nothing: the warm-up meets every variant that mixed prefill chunks,
    decodes, static padding and draft-model steps reach, so serving meets none (the same workload on an
    engine without the warm-up compiles in its steps: the count is real). The warm-up's time is on the
    engine's clock and its progress is told as it goes."""
    from engine import EngineConfig, LLMEngine
    from engine.model import kernel_variants
    from engine_helpers import check_drained, greedy, mixed_prompts
    from tiny_models import reference_greedy
    family = "qwen3"
    prompts, max_tokens = mixed_prompts(7)
    max_tokens = [min(m, 5) for m in max_tokens]
    extra = dict(strategy="static") if lane == "static" else {}
    if lane == "draft model":
        extra = dict(speculative="draft", speculative_model=str(tiny_draft_dirs[family]))
    for warm in (True, False) if lane == "continuous" else (True,):
        kernel_variants.forget()
        ticks, told = iter(range(10**6)), []
        cfg = EngineConfig(model=str(tiny_model_dirs[family]), device=DEVICE, dtype="float32", block_size=4,
                           num_kv_blocks=40, max_model_len=64, max_num_seqs=4, static_batch_size=4,
                           max_num_batched_tokens=16, attention_backend="triton", warmup=warm, **extra)
        eng = LLMEngine(cfg, clock=lambda: float(next(ticks)), on_warmup=lambda *a: told.append(a))
        if warm:
            report = eng.warmup
            # the write kernel and two tile heights (on CUDA the graph captures at load met the decode one)
            assert report.seconds == 1.0 and report.compiled >= (1 if _CUDA else 3)
            compiling = [(0, 1, "compiling the decode forward with torch.compile")] if eng.runner.torch_compile else []
            assert told == compiling + [(i, len(report.batches), b) for i, b in enumerate(report.batches)] + \
                [(len(report.batches), len(report.batches), "done")]
            assert report.batches[0] == "decode row" and "prefill of 16 tokens" in report.batches
            assert any("(draft model)" in b for b in report.batches) == (lane == "draft model")
        outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
        assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs[family], prompts, max_tokens)
        assert (eng.kernel_compiles == 0) == warm, eng.kernel_compiles
        check_drained(eng)


def test_one_warmup_forward_per_tile_height():
    """Every query length up to the longest a step holds launches the attention kernel with the tile
    height of one warm-up forward, and the largest forward is the token budget itself."""
    from engine.model.triton_attention import _block_q
    from engine.model.warmup import warmup_lengths
    for heads, kv_heads in [(9, 3), (14, 2), (16, 8), (4, 4), (32, 1)]:
        runner = SimpleNamespace(backend="triton", hf_config=SimpleNamespace(num_attention_heads=heads),
                                 kv_shape=SimpleNamespace(kv_heads=kv_heads))
        gp = triton.next_power_of_2(heads // kv_heads)
        for longest, largest in [(512, 512), (4096, 512), (64, 16), (8, 8), (1, 1)]:
            lengths = warmup_lengths(runner, longest, largest)
            assert lengths[0] == 1 and largest in lengths and max(lengths) <= max(longest, largest)
            warm = {_block_q(gp, n) for n in lengths}
            assert {_block_q(gp, q) for q in range(1, longest + 1)} <= warm, (heads, kv_heads, longest)
            assert len(warm) >= len(lengths) - 1  # a tile height twice at most: the decode row's
    torch_runner = SimpleNamespace(backend="torch")
    assert warmup_lengths(torch_runner, 4096, 512) == [1, 512]


# --- decode steps through CUDA-graph buckets (EngineConfig.cuda_graphs) -------------------------

@kernels
@pytest.mark.parametrize("strategy,overlap", [("continuous", False), ("continuous", True), ("static", False)])
def test_decode_graph_buckets_equal_generate(tiny_model_dirs, strategy, overlap):
    """Decode-only steps run through padded buckets (replayed graphs on CUDA; the same bucketed
    forward eagerly in the interpreter): outputs still equal generate(), nothing is lost. With overlap,
    each bucket's input tokens are those the step before sampled, filled in on the device."""
    from engine_helpers import check_drained, greedy, make_engine, mixed_prompts
    from tiny_models import reference_greedy
    mixed, mixed_max = mixed_prompts(7)
    # then five short prompts decoding together: 5 rows run in the bucket of 6, 3 rows in that of 4
    batches = [(mixed, [min(m, 6) for m in mixed_max]), ([[5 + i, 9, 13 + i] for i in range(5)], [2, 3, 6, 6, 6])]
    eng = make_engine(tiny_model_dirs["qwen3"], strategy=strategy, attention_backend="triton", device=DEVICE,
                      cuda_graphs=True, torch_compile=False, max_num_seqs=6, static_batch_size=5, num_kv_blocks=20,
                      max_model_len=64, max_num_batched_tokens=16, overlap=overlap)
    for prompts, max_tokens in batches:
        outs = eng.generate(prompts, [greedy(m) for m in max_tokens])
        assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["qwen3"], prompts, max_tokens)
    graphs = eng.runner.graphs
    assert graphs.sizes == [1, 2, 4, 6] and graphs.failed is None
    assert any(rows < bucket for rows, bucket in graphs.steps), "no step ran with padding rows"
    check_drained(eng)


@kernels
def test_compiled_decode_buckets_equal_generate(tiny_model_dirs):
    """torch_compile: the buckets' forward built by torch.compile (without CUDA, inductor's C++ around the
    interpreted kernels, which it calls as one custom operator a layer): outputs still equal generate();
    one compile serves every bucket, and a second engine on the same weights (another lane, another KV pool)
    compiles nothing more."""
    import torch._dynamo
    from engine.llm_engine import LLMEngine
    from engine_helpers import check_drained, greedy, mixed_prompts
    from tiny_models import reference_greedy
    torch._dynamo.reset()  # (an earlier test's engine on these shapes, compiled by default on CUDA, would be reused)
    graphs = torch._dynamo.utils.counters["stats"]  # (for the whole process: earlier tests' compiles count too)
    before = graphs["unique_graphs"]
    model = tiny_model_dirs["qwen3"]
    from engine.config import EngineConfig
    told = []  # what the warm-up's progress said (the sidebar shows it)
    eng = LLMEngine(EngineConfig(model=str(model), dtype="float32", block_size=4, attention_backend="triton",
                                 device=DEVICE, cuda_graphs=True, torch_compile=True, linear_backend="torch",
                                 max_num_seqs=6, static_batch_size=4, num_kv_blocks=20, max_model_len=64,
                                 max_num_batched_tokens=16),
                    on_warmup=lambda done, total, what: told.append(what))
    assert told[:1] == ["compiling the decode forward with torch.compile"]
    assert eng.runner.graphs_state().startswith(("on" if _CUDA else "eager buckets") + ", compiled in ")
    compiles = graphs["unique_graphs"]
    assert compiles == before + 1 and eng.runner.graphs.sizes == [2, 4, 6]  # a one-row step runs in the bucket of 2
    assert eng.runner.graphs.graph_breaks == 0  # one graph: everything fused that can be
    other = LLMEngine(eng.cfg, share_weights_with=eng)
    assert other.runner.graphs.pool_key != eng.runner.graphs.pool_key
    mixed, mixed_max = mixed_prompts(7)
    batches = [(mixed, [min(m, 6) for m in mixed_max]), ([[5 + i, 9, 13 + i] for i in range(5)], [2, 3, 6, 6, 6])]
    for e, runs in ((eng, batches), (other, batches[1:])):
        for prompts, max_tokens in runs:
            outs = e.generate(prompts, [greedy(m) for m in max_tokens])
            assert [o.output_token_ids for o in outs] == reference_greedy(model, prompts, max_tokens)
        assert any(rows < bucket for rows, bucket in e.runner.graphs.steps), "no step ran with padding rows"
        check_drained(e)
    assert graphs["unique_graphs"] == compiles


@kernels
def test_a_failed_compile_leaves_the_decode_forward_uncompiled(tiny_model_dirs, monkeypatch):
    """A compiler that fails (no C++ toolchain, an unsupported operator) costs speed, never a request."""
    from engine.model import decode_graphs
    from engine_helpers import greedy, make_engine
    from tiny_models import reference_greedy

    def broken(fn, **_):
        def run(*a, **k):
            raise RuntimeError("no compiler here")
        return run
    monkeypatch.setattr(decode_graphs.torch, "compile", broken)
    eng = make_engine(tiny_model_dirs["llama"], attention_backend="triton", device=DEVICE, cuda_graphs=True,
                      torch_compile=True, max_num_seqs=4, num_kv_blocks=16, max_model_len=64)
    assert eng.runner.graphs_state().endswith(", compile failed (RuntimeError: no compiler here)")
    prompts = [[5, 9, 13], [7, 8]]
    outs = eng.generate(prompts, [greedy(5), greedy(5)])
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["llama"], prompts, [5, 5])


@kernels
@pytest.mark.skipif(not hasattr(torch.compiler, "_compile_session_context"), reason="this torch has no such context")
def test_an_eager_step_while_another_thread_compiles_runs_the_kernels_itself(tiny_model_dirs):
    """While any thread compiles, torch.compiler.is_compiling() is true in every thread: another lane's eager
    step (a prefill, a batch no bucket holds) must still launch the kernels itself, not the compiled
    forward's operator (which knows no pool for it)."""
    from engine_helpers import greedy, make_engine
    from tiny_models import reference_greedy
    eng = make_engine(tiny_model_dirs["llama"], attention_backend="triton", device=DEVICE, cuda_graphs=False)
    prompts = [[5, 9, 13, 17], [7, 8]]
    with torch.compiler._compile_session_context():
        outs = eng.generate(prompts, [greedy(4), greedy(4)])
    assert [o.finish_reason for o in outs] == ["length", "length"], [o.error for o in outs]
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs["llama"], prompts, [4, 4])


def test_torch_compile_needs_the_decode_graphs_and_defaults_on_with_them_on_cuda():
    from engine.config import EngineConfig, resolve_torch_compile
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_torch_compile(None, cuda, True) and not resolve_torch_compile(None, cuda, False)
    assert not resolve_torch_compile(None, cpu, True)  # the interpreter's eager buckets: only when asked
    assert resolve_torch_compile(True, cpu, True)
    with pytest.raises(ValueError, match="torch_compile=True compiles the decode graphs' forward: it needs cuda_graphs"):
        resolve_torch_compile(True, cuda, False)
    with pytest.raises(ValueError, match="EngineConfig.torch_compile must be None, True or False"):
        EngineConfig(torch_compile="yes")


def test_decode_graph_buckets():
    from engine.model.decode_graphs import buckets
    assert buckets(1) == [1] and buckets(6) == [1, 2, 4, 6]
    assert buckets(16) == [1, 2, 4, 8, 16] and buckets(20) == [1, 2, 4, 8, 16, 20]


def test_cuda_graphs_need_the_triton_backend_and_default_on_cuda(tiny_model_dirs):
    from engine_helpers import make_engine
    with pytest.raises(ValueError, match="cuda_graphs=True needs attention_backend='triton'"):
        make_engine(tiny_model_dirs["llama"], cuda_graphs=True, attention_backend="torch", device=DEVICE)
    with pytest.raises(ValueError, match="EngineConfig.cuda_graphs must be None, True or False"):
        make_engine(tiny_model_dirs["llama"], cuda_graphs="yes")
    if _CUDA or _INTERPRETING:
        eng = make_engine(tiny_model_dirs["llama"], device=DEVICE, attention_backend="triton")
        assert eng.runner.cuda_graphs is _CUDA  # the default: on with Triton attention on CUDA only
        assert eng.runner.graphs_state().startswith("on, compiled in " if _CUDA else "off")


@pytest.mark.skipif(not _CUDA, reason="host syncs exist only with a GPU")
@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("overlap", [True, False])
def test_a_step_makes_the_host_wait_for_the_gpu_once(tiny_model_dirs, graphs, overlap):
    """torch's sync debug mode reports every operation that makes the host wait for the GPU: a step has
    none (its index tensors go up in one non-blocking copy); it waits once, where it reads its sampled
    tokens back, on the event of their copy to pinned memory (SampledTokens), which the mode does not report."""
    import warnings
    from engine_helpers import greedy, make_engine
    eng = make_engine(tiny_model_dirs["qwen3"], attention_backend="triton", device=DEVICE, cuda_graphs=graphs,
                      overlap=overlap)
    for i in range(3):
        eng.add_request([5 + i, 9, 13, 21 + i], greedy(8))
    eng.add_request(list(range(30, 70)), greedy(4))  # a prefill in chunks beside the decodes
    phases, captured = [], lambda: len(eng.runner.graphs.captured) if graphs else 0
    for _ in range(6):
        before = captured()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                ev = eng.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
        assert not syncs or captured() > before, (ev.step, syncs)  # a capture waits, once per bucket
        phases += [e.phase for e in ev.entries]
    assert {"prefill", "decode"} <= set(phases)
