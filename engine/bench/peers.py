"""Peers to compare against: transformers' generate() on padded batches, and transformers'
own continuous batching. Same model folder, device and dtype as our engine.

hf-generate: what most users write. Requests are taken in arrival order in batches of
`static_batch_size`; a batch starts once its last member has arrived (and the previous
batch is done), left-padded to its longest prompt, greedy, EOS disabled, and
max_new_tokens = the batch's largest max_tokens. Each request counts only its own
max_tokens as output; what the batch computes beyond that is padding waste.
Timing: a StoppingCriteria records the clock each time generate() has produced a token
for the batch, so the first record is the batch's first token (prefill done) and record k
is when token k exists. A request's first_token_s is record 1 and its finish_s is record
max_tokens: the times a streaming user would see. (Without a streamer every request of a
batch would get its text only when the whole batch returns, later still.) KV: generate()'s
cache holds batch x (padded prompt + tokens so far) slots; slots of padding and of tokens
past a request's own max_tokens are counted as unused.

hf-cb: `model.init_continuous_batching` manager (the engine behind `generate_batch`; used
directly because generate_batch takes one max_new_tokens for all requests and has no
arrival times), run in its own process (`python -m engine.bench.peers hf-cb JOB.json`),
configured explicitly: page (block) size = our block_size, num_blocks = our KV slots /
block size, max_batch_tokens = max_num_batched_tokens, max_requests_per_batch =
max_num_seqs, FIFO scheduler, no prefix sharing (our engine has none), no CUDA graphs or
compile on CPU. Per-token timestamps come from its own record_timestamps; it exposes no
per-step view, so padding/KV waste and batch size are not reported for it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..config import EngineConfig, dtype_choice, dtype_name
from ..kv.pool import kv_shape
from ..kv.sizing import num_kv_blocks
from ..model.tokens import eos_token_ids, pad_token_id
from ..paths import REPO
from .config import BenchConfig
from .control import Cancelled, CpuShare, check_cancel, is_cancelled, report
from ..telemetry.records import RequestRecord, StepSample, LaneRun
from .workloads import RequestSpec, Workload, load_trace, save_trace

# ---------------------------------------------------------------------------- shared loading

def _precision(cfg: EngineConfig, device) -> dict:
    """The dtype a peer ran in (the lanes': they compare at equal precision), and why."""
    dtype, why = dtype_choice(cfg.dtype, device)
    return {"dtype": dtype_name(dtype), "dtype_why": why}


def _load_hf(cfg: EngineConfig, attn_implementation: str | None = None):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..config import resolve_device, resolve_dtype
    from ..model.files.loader import resolve_model_dir

    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    model_dir = resolve_model_dir(cfg.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    kw = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kw).to(device).eval()
    torch.set_grad_enabled(False)
    return model, tok, device, dtype


def _pad_id(model, tok) -> int:
    """The engine's pad token (read before a peer clears the model's EOS)."""
    return pad_token_id(tok, eos_token_ids(model.generation_config, tok))


def _sleep_until(deadline: float, clock, sleep, cancel) -> None:
    while True:
        check_cancel(cancel)
        left = deadline - clock()
        if left <= 0:
            return
        sleep(min(left, 0.1))


# ---------------------------------------------------------------------------- hf-generate

class _TokenClock:
    """A StoppingCriteria that timestamps every token generate() produces and stops on cancel."""

    def __init__(self, batch: int, clock, on_token=None, cancel=None):
        self.times: list[float] = []
        self.batch, self.clock, self.on_token, self.cancel = batch, clock, on_token, cancel

    def __call__(self, input_ids, scores, **kwargs):
        import torch
        self.times.append(self.clock())
        if self.on_token is not None:
            self.on_token(len(self.times))
        stop = is_cancelled(self.cancel)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def run_hf_generate(workloads: list[Workload], cfg: BenchConfig, progress=None, cancel=None,
                    clock=time.perf_counter, sleep=time.sleep) -> list[LaneRun]:
    import gc

    report(progress, strategy="hf-generate", stage="load", message=f"loading {cfg.engine.model}")
    model, tok, device, dtype = _load_hf(cfg.engine)
    pad = _pad_id(model, tok)
    model.generation_config.eos_token_id = None  # else generate() stops at EOS despite max_new_tokens
    attn = model.config._attn_implementation
    try:
        check_cancel(cancel)
        report(progress, strategy="hf-generate", stage="warmup")
        warmup_s = clock()
        if cfg.warmup_requests:  # a whole batch of the run's shape, as the engine's warm-up reaches its sizes
            warm = workloads[0].requests[:max(cfg.warmup_requests, cfg.engine.static_batch_size)]
            _generate(model, [dataclasses.replace(r, max_tokens=4) for r in warm], pad, device, clock)
        warmup_s = clock() - warmup_s
        runs = []
        for w in workloads:
            gc.collect()
            run = _hf_generate_workload(model, w, cfg, pad, device, clock, sleep, progress, cancel)
            run.info.update({"device": str(device), **_precision(cfg.engine, device), "linear": "torch",
                             "attn_implementation": attn, "batch_size": cfg.engine.static_batch_size,
                             "warmup_s": warmup_s})
            runs.append(run)
        return runs
    finally:
        del model
        gc.collect()


def _hf_generate_workload(model, w: Workload, cfg: BenchConfig, pad: int, device, clock, sleep, progress,
                          cancel) -> LaneRun:
    specs = sorted(w.requests, key=lambda r: (r.arrival_s, r.index))
    rate, total, bs = w.params.get("rate"), len(specs), cfg.engine.static_batch_size
    records: list[RequestRecord] = []
    steps: list[StepSample] = []
    report(progress, strategy="hf-generate", stage="run", done=0, total=total, rate=rate)
    cpu = CpuShare()
    t0 = clock()
    for start in range(0, total, bs):
        group = specs[start:start + bs]
        _sleep_until(t0 + group[-1].arrival_s, clock, sleep, cancel)  # the batch is complete
        done_before = len(records)

        def on_token(k, group=group, done_before=done_before):
            n = sum(1 for r in group if r.max_tokens == k)
            if n:
                report(progress, strategy="hf-generate", stage="run", rate=rate, total=total,
                       done=done_before + sum(1 for r in group if r.max_tokens <= k))

        t_launch = clock()
        times = _generate(model, group, pad, device, clock, on_token, cancel)
        check_cancel(cancel)
        records.extend(RequestRecord(r.index, t0 + r.arrival_s, t_launch, times[0], times[r.max_tokens - 1],
                                     len(r.prompt_token_ids), r.max_tokens, "length") for r in group)
        steps.extend(generate_steps(group, t_launch, times))
    records.sort(key=lambda r: r.index)
    report(progress, strategy="hf-generate", stage="done", done=total, total=total, rate=rate)
    # generate()'s cache is not bounded by our KV budget: record its peak to compare
    peak = max((s.kv_allocated_slots for s in steps), default=0)
    return LaneRun("hf-generate", records, steps, t0, {"rate": rate, "kv_peak_slots": peak,
                                                           "other_cpu_pct": cpu.other_cpu_pct()})


def _generate(model, group: list[RequestSpec], pad: int, device, clock, on_token=None, cancel=None) -> list[float]:
    """One left-padded generate() call; returns the clock at each produced token."""
    import torch
    from transformers import GenerationConfig, StoppingCriteriaList

    width = max(len(r.prompt_token_ids) for r in group)
    ids = torch.full((len(group), width), pad, dtype=torch.long)
    mask = torch.zeros((len(group), width), dtype=torch.long)
    for i, r in enumerate(group):
        n = len(r.prompt_token_ids)
        ids[i, width - n:] = torch.tensor(r.prompt_token_ids)
        mask[i, width - n:] = 1
    new = max(r.max_tokens for r in group)
    gen = GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=pad,
                           use_cache=True)
    stepper = _TokenClock(len(group), clock, on_token, cancel)
    out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=gen,
                         stopping_criteria=StoppingCriteriaList([stepper]))
    if not is_cancelled(cancel) and (out.shape[1] - width != new or len(stepper.times) != new):
        raise RuntimeError(f"generate() produced {out.shape[1] - width} tokens per row, expected {new} "
                           f"(is EOS still enabled?)")
    return stepper.times


def generate_steps(group: list[RequestSpec], t_launch: float, times: list[float]) -> list[StepSample]:
    """Step samples of one generate() batch: forward k produced token k+1 (k=0 is the prefill).

    Forward 0 computes rows x padded prompt width (left padding is waste); forward k >= 1 feeds
    token k of every row, useful only for rows whose max_tokens > k. The cache after forward k
    holds rows x (width + k) slots; useful ones are each prompt plus its tokens fed so far."""
    rows = len(group)
    lens = [len(r.prompt_token_ids) for r in group]
    width = max(lens)
    steps = []
    for k, t_end in enumerate(times):
        t_start = t_launch if k == 0 else times[k - 1]
        useful_kv = sum(p + min(k, r.max_tokens - 1) for p, r in zip(lens, group))
        allocated = rows * (width + k)
        if k == 0:
            steps.append(StepSample(t_start, t_end, rows, rows, sum(lens), 0, rows * width - sum(lens),
                                    allocated, allocated - useful_kv))
        else:
            active = sum(1 for r in group if r.max_tokens > k)
            steps.append(StepSample(t_start, t_end, rows, active, 0, active, rows - active,
                                    allocated, allocated - useful_kv))
    return steps


# ---------------------------------------------------------------------------- hf-cb (parent side)

def run_hf_cb(workloads: list[Workload], cfg: BenchConfig, kv_blocks: int | None = None, progress=None,
              cancel=None) -> list[LaneRun]:
    """Run transformers' continuous batching in a child process on each workload."""
    report(progress, strategy="hf-cb", stage="load", message=f"starting a process for {cfg.engine.model}")
    with tempfile.TemporaryDirectory(prefix="inflight-hfcb-") as tmp:
        traces = []
        for i, w in enumerate(workloads):
            path = Path(tmp) / f"trace{i}.jsonl"
            save_trace(w, path)
            traces.append(str(path))
        job = {"config": cfg.to_dict(), "kv_blocks": kv_blocks, "traces": traces, "out": str(Path(tmp) / "out.json")}
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        _run_child(job_path, workloads, progress, cancel, Path(tmp) / "child.log")
        result = json.loads(Path(job["out"]).read_text())
    runs = []
    for w, res in zip(workloads, result["runs"]):
        recs = [RequestRecord(**r) for r in res["requests"]]
        info = {**result["info"], "rate": w.params.get("rate"), "other_cpu_pct": res.get("other_cpu_pct")}
        runs.append(LaneRun("hf-cb", recs, [], 0.0, info))
    return runs


def _run_child(job_path: Path, workloads, progress, cancel, log_path: Path) -> None:
    root = str(REPO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "engine.bench.peers", "hf-cb", str(job_path)],
                                stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=root)
        reader = threading.Thread(target=_relay_progress, args=(proc.stdout, workloads, progress), daemon=True)
        reader.start()
        try:
            while proc.poll() is None:
                if is_cancelled(cancel):
                    proc.terminate()
                    proc.wait(timeout=10)
                    raise Cancelled("benchmark cancelled")
                time.sleep(0.1)
        except BaseException:
            if proc.poll() is None:
                proc.kill()
            raise
        finally:
            reader.join(timeout=5)
    if proc.returncode != 0:
        tail = log_path.read_text()[-3000:]
        raise RuntimeError(f"hf-cb child process failed (exit {proc.returncode}):\n{tail}")


def _relay_progress(stream, workloads, progress) -> None:
    for line in stream:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "@progress" and progress is not None:
            stage, run_i, done = parts[1], int(parts[2]), int(parts[3])
            w = workloads[run_i]
            report(progress, strategy="hf-cb", stage=stage, done=done, total=len(w), rate=w.params.get("rate"))


# ---------------------------------------------------------------------------- hf-cb (child side)

def _cb_config(cfg: EngineConfig, kv_blocks: int, device):
    """An explicit ContinuousBatchingConfig matching our engine's limits and KV budget."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    kw = {"num_blocks": kv_blocks, "max_batch_tokens": cfg.max_num_batched_tokens,
          "max_requests_per_batch": cfg.max_num_seqs, "scheduler_type": "fifo", "allow_block_sharing": False}
    # transformers 5.23 calls the block size page_size; 5.17 calls it block_size.
    kw["page_size" if "page_size" in names else "block_size"] = cfg.block_size
    if device.type != "cuda":
        kw.update(use_cuda_graph=False, use_async_batching=False)
    if "default_compile_level" in names:
        kw["default_compile_level"] = 0
    return ContinuousBatchingConfig(**{k: v for k, v in kw.items() if k in names}), kw


def _child_main(job_path: str) -> int:
    import torch
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    job = json.loads(Path(job_path).read_text())
    bench = BenchConfig.from_dict(job["config"])
    cfg = bench.engine
    if bench.threads:
        torch.set_num_threads(bench.threads)
    names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    # 5.23 accepts "sdpa" (it switches to a paged path itself); 5.17 needs "paged|sdpa" pinned.
    attn = "sdpa" if "page_size" in names else "paged|sdpa"
    model, tok, device, dtype = _load_hf(cfg, attn_implementation=attn)
    kv_blocks = job["kv_blocks"] or num_kv_blocks(cfg, [kv_shape(model.config)], dtype, device)
    cb_cfg, cb_kw = _cb_config(cfg, kv_blocks, device)
    gen = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=_pad_id(model, tok), max_new_tokens=16)
    workloads = [load_trace(p) for p in job["traces"]]
    runs = []
    _emit("warmup", 0, 0)
    warmup_s = time.perf_counter()
    # transformers' own warm-up (its CUDA graphs, where it uses them) runs as the manager starts
    with model.continuous_batching_context_manager(generation_config=gen, continuous_batching_config=cb_cfg,
                                                   block=True, timeout=30, warmup=True) as manager:
        warm = workloads[0].requests[:bench.warmup_requests]
        if warm:
            _cb_run(manager, [dataclasses.replace(r, arrival_s=0.0, max_tokens=4) for r in warm], None, "warmup")
        warmup_s = time.perf_counter() - warmup_s
        for i, w in enumerate(workloads):
            runs.append(_cb_run(manager, w.requests, i, f"run{i}-"))
    info = {"device": str(device), **_precision(cfg, device), "linear": "torch",
            "attn_implementation": attn, "warmup_s": warmup_s,
            "kv_blocks": kv_blocks, "continuous_batching_config": cb_kw, "torch_threads": torch.get_num_threads()}
    Path(job["out"]).write_text(json.dumps({"runs": runs, "info": info}))
    return 0


def _emit(stage: str, run_i: int, done: int) -> None:
    print(f"@progress {stage} {run_i} {done}", flush=True)


def _cb_run(manager, specs: list[RequestSpec], run_i: int | None, id_prefix: str) -> dict:
    """Feed requests at their arrival times, collect results; times relative to the run's t0."""
    clock = time.perf_counter
    pending = sorted(specs, key=lambda r: (r.arrival_s, r.index))
    by_id: dict[str, RequestSpec] = {}
    results = {}
    if run_i is not None:
        _emit("run", run_i, 0)
    cpu = CpuShare()
    t0 = clock()
    i = 0
    while len(results) < len(specs):
        now = clock()
        while i < len(pending) and t0 + pending[i].arrival_s <= now:
            r = pending[i]
            rid = manager.add_request(r.prompt_token_ids, request_id=f"{id_prefix}{r.index}",
                                      max_new_tokens=r.max_tokens, record_timestamps=True)
            by_id[rid] = r
            i += 1
        wait = 0.5 if i >= len(pending) else max(0.0, min(0.5, t0 + pending[i].arrival_s - clock()))
        res = manager.get_result(timeout=wait) if by_id else None
        if res is None:
            if by_id and not manager.is_running():
                raise RuntimeError("transformers' continuous batching thread stopped")
            if not by_id:
                time.sleep(wait)
            continue
        if res.is_finished():
            results[res.request_id] = res
            if run_i is not None:
                _emit("run", run_i, len(results))
    records = []
    for rid, r in by_id.items():
        res = results[rid]
        ts = res.timestamps or []
        ok = res.error is None and len(res.generated_tokens) == r.max_tokens
        records.append({
            "index": r.index, "arrival_s": r.arrival_s,
            "scheduled_s": res.lifespan[0] - t0 if res.lifespan[0] > 0 else None,
            "first_token_s": ts[0] - t0 if ts else None,
            "finish_s": (ts[-1] if ts else res.lifespan[1]) - t0,
            "prompt_tokens": len(r.prompt_token_ids), "output_tokens": len(res.generated_tokens),
            "finish_reason": "length" if ok else "error",
        })
    records.sort(key=lambda d: d["index"])
    if run_i is not None:
        _emit("done", run_i, len(records))
    return {"requests": records, "other_cpu_pct": cpu.other_cpu_pct()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.peers",
                                 description="Run a peer strategy in this process (used by the benchmark).")
    ap.add_argument("peer", choices=["hf-cb"])
    ap.add_argument("job", help="job JSON written by run_hf_cb()")
    args = ap.parse_args(argv)
    return _child_main(args.job)


if __name__ == "__main__":
    sys.exit(main())
