"""Where one engine step's time goes, on this machine: python -m engine.bench.step_profile

For each (batch, context) it fills an engine with `batch` requests whose contexts are `context` tokens,
then times decode-only steps, split into the engine's phases (schedule, batch build, forward, sampling,
update + detokenize, telemetry) and the forward's operators (linear layers, K/V gather, attention, K/V
write, the rest), from torch.profiler; and each step's event on the socket (`event KB`: as sent, the KV
as its changes; `whole KB`: with the KV tables whole), median over the steps. Every step is a real engine
step; the phases are timed by wrapping the engine's own methods, so nothing here re-implements the engine.

    python -m engine.bench.step_profile --batches 1,8,32 --contexts 64,512 [--steps 8] [--json out.json]
    python -m engine.bench.step_profile --mixed --batches 16 --contexts 1024   # grouped vs one group
    python -m engine.bench.step_profile --linear torch,onednn   # linear layers through F.linear vs oneDNN
    python -m engine.bench.step_profile --device cuda --attention-backend triton --cuda-graphs off
    python -m engine.bench.step_profile --batches 1,256 --contexts 128 --no-ops   # wall clock, no profiler
    python -m engine.bench.step_profile --batches 16 --contexts 128 --temperature 0.8 [--top-p 0.95]  # sampled
    python -m engine.bench.step_profile --overlap on,off   # the next step launched before this one is read back
    python -m engine.bench.step_profile --device cuda --trace traces/   # each point's timeline, for Perfetto

`host` is what the step costs beside the model: the step less its forward on the CPU, less the GPU's
busy time on a GPU (the time the GPU waits for Python), and `host/row` that per row, in microseconds.
torch.profiler inflates small operators: --no-ops times the same steps by wall clock alone (no forward
split by operator, and on a GPU no busy time). The timed steps follow --warm-steps untimed ones (16): a batch's
first decode steps run cold, CPython specializing the step's bytecode only after it ran a few times (PEP 659),
and the first step of a batch builds its inputs where later ones write into them. With a tiny model on a 2-core
AMD EPYC, one row's host time fell from 351-392 us at the first step to 89-105 us by the tenth (--per-step prints
each timed step's: --warm-steps 0 --steps 40, two runs). Block boundaries (a step whose position starts a block:
every 16th with the default block size) cost about twice a step's host, 198-207 us: --steps 64 averages them in.

On a GPU the phases are host time (a kernel launch returns at once; the step waits for the GPU
where it reads its sampled tokens back, which counts as sampling), and `gpu busy` is the time the
GPU's kernels ran per step: the step time minus that is what the host costs. Where the host waits, and for
what, the phases do not say (with overlap the wait for the step in flight falls inside a launch): `--trace DIR`
writes each point's torch.profiler timeline (DIR/step_b<batch>_c<context>_<linear>_overlap_<on|off>.json.gz,
for ui.perfetto.dev or chrome://tracing), the engine's phases labelled on the host's thread beside the CUDA API
calls and, on a GPU, each kernel.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import weakref
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from ..config import EngineConfig
from ..events import StepMessage
from ..gc_pauses import collect_dropped, freeze_long_lived
from ..kv_wire import KvFrames
from ..llm_engine import LLMEngine
from ..model import packed_batch, runner as runner_module
from ..model.device_tokens import SampledTokens
from ..request import SamplingParams
from ..workshop.scenarios.model import prompt_ids
from .config import SWITCH

# aten operators -> the part of the forward they belong to
OP_GROUPS = {
    "linear layers": ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul",
                      "mkldnn::_linear_pointwise"),
    "K/V gather": ("aten::index_select",),
    "attention": ("aten::_scaled_dot_product", "aten::scaled_dot_product", "aten::_softmax", "aten::softmax"),
    "K/V write": ("aten::index_copy_",),
}
MIXED_SHORT = 16  # prompt tokens of the short rows beside the long one (--mixed)
PHASES = ("schedule", "batch build", "forward", "sampling", "update + detokenize", "telemetry")


class PhaseTimer:
    """Wraps the engine's methods so each step's time is split by phase (seconds, summed); a context
    manager that puts the originals back."""

    def __init__(self, eng: LLMEngine, labels: bool = False):
        self.total: dict[str, float] = defaultdict(float)
        self.labels = labels  # each call also a named range in torch.profiler's timeline
        self._targets = [(eng.scheduler, "schedule", "schedule"), (eng.runner.model, "forward", "forward"),
                         (eng.scheduler, "update", "update + detokenize"),
                         (eng.scheduler, "settle", "update + detokenize"),
                         (eng.output, "process", "update + detokenize"), (eng, "_event", "telemetry"),
                         (runner_module, "sample", "sample"), (runner_module, "sampled_tokens", "sample"),
                         (SampledTokens, "tolist", "read back"),
                         (eng.runner, "launch", "launch")]  # batch build = launch - forward - sample
        if eng.runner.graphs is not None:  # decode steps through a graph bucket call no model.forward
            self._targets.append((eng.runner.graphs, "logits", "forward"))
        self._saved: list[tuple[object, str, object]] = []

    def __enter__(self) -> PhaseTimer:
        for obj, name, phase in self._targets:
            self._saved.append((obj, name, obj.__dict__.get(name)))
            setattr(obj, name, self._timed(getattr(obj, name), phase))
        return self

    def __exit__(self, *exc) -> None:
        for obj, name, original in self._saved:
            if original is None:
                delattr(obj, name)  # the class's method shows through again
            else:
                setattr(obj, name, original)

    def _timed(self, fn, phase: str):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                with record_function(phase) if self.labels else contextlib.nullcontext():
                    return fn(*a, **k)
            finally:
                self.total[phase] += time.perf_counter() - t
        return timed

    def phases(self) -> dict[str, float]:
        t = dict(self.total)
        t["batch build"] = t.pop("launch", 0.0) - t.get("forward", 0.0) - t.get("sample", 0.0)
        t["sampling"] = t.pop("sample", 0.0) + t.pop("read back", 0.0)  # (on a GPU: the wait for the step)
        return {p: t.get(p, 0.0) for p in PHASES}


def fill(eng: LLMEngine, contexts: list[int], steps: int, sampling: dict | None = None) -> None:
    """Add one request per entry of `contexts` (its prompt tokens) and step until all of them decode;
    each then has `steps` more tokens to make (the first to finish prefill decode meanwhile)."""
    tokens = steps + 2 + fill_steps(eng.cfg.max_num_batched_tokens, contexts)
    params = SamplingParams(max_tokens=tokens, ignore_eos=True, **(sampling or {}))
    for i, context in enumerate(contexts):
        eng.add_request(prompt_ids(context, i), params)
    while any(not r.output_token_ids for r in eng.requests.values()):
        eng.step()
    if eng.in_flight is not None:  # overlap: the step in flight may be a last prefill chunk; settle it
        eng.step()


def fill_steps(budget: int, contexts: list[int]) -> int:
    """At most how many steps filling takes: the prompts through what the token budget leaves beside
    one decode token per row, and one more."""
    return -(-sum(contexts) // max(1, budget - len(contexts))) + 1


def profile_point(eng: LLMEngine, contexts: list[int], steps: int, ops: bool = True,
                  trace: Path | None = None, sampling: dict | None = None, warm: int = 0) -> dict:
    """Time `steps` decode steps of len(contexts) rows, after `warm` untimed ones; ops: under torch.profiler,
    the forward split by operator (and on a GPU its busy time), else by wall clock alone; trace: where the
    profiler's timeline goes (gzipped Chrome trace JSON); sampling: the requests' SamplingParams fields
    (default: greedy)."""
    fill(eng, contexts, steps + warm, sampling)
    for _ in range(warm):
        eng.step()
    cuda = eng.runner.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with PhaseTimer(eng, labels=trace is not None) as timer, \
            (profile(activities=activities) if ops else contextlib.nullcontext()) as prof:
        t0 = time.perf_counter()
        events, each_us = [], []
        for _ in range(steps):  # (each step's own host time too: the step less its forward call)
            s0, f0 = time.perf_counter(), timer.total["forward"]
            events.append(eng.step())
            each_us.append(1e6 * (time.perf_counter() - s0 - (timer.total["forward"] - f0)))
        wall = time.perf_counter() - t0  # before the profiler's own processing at exit
    if trace is not None:  # (torch gzips a path that ends in .gz)
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    for rid in list(eng.requests):
        eng.abort(rid)
    forward_s = timer.total["forward"]
    gpu_s = gpu_kernel_seconds(prof) if cuda and ops else 0.0
    host_s = wall - (gpu_s if cuda else forward_s)
    return {"batch": len(contexts), "context": max(contexts), "steps": steps, "warm_steps": warm,
            "step_ms": 1e3 * wall / steps,
            "gpu_busy_ms": 1e3 * gpu_s / steps, "host_ms": 1e3 * host_s / steps,
            "host_us_per_row": 1e6 * host_s / steps / len(contexts), "host_us_each_step": each_us,
            "phases_ms": {k: 1e3 * v / steps for k, v in timer.phases().items()},
            "forward_ms": {k: 1e3 * v / steps for k, v in _op_groups(prof, forward_s).items()} if ops else {},
            **wire_sizes(events)}


def trace_path(folder: str | None, eng: LLMEngine, batch: int, context: int) -> Path | None:
    if not folder:
        return None
    overlap = "on" if eng.overlap else "off"
    return Path(folder) / f"step_b{batch}_c{context}_{eng.runner.linear}_overlap_{overlap}.json.gz"


def wire_sizes(events) -> dict:
    """The steps' JSON on the socket, stamped as a lane publishes them (engine/kv_wire.py), median KB a
    step: as sent (the KV's changes) and with the KV tables whole (a key frame's)."""
    frames, sent, whole = KvFrames(), [], []
    for ev in events:
        frames.stamp(ev)
        msg = StepMessage(event=ev)
        sent.append(len(msg.json().encode()) / 1024)
        whole.append(len(msg.key_json().encode()) / 1024)
    return {"event_kb": statistics.median(sent), "event_whole_kb": statistics.median(whole)}


def gpu_kernel_seconds(prof) -> float:
    """Time the GPU's kernels ran: the CUDA events' own time (an operator's device time repeats its
    kernels'; user annotations span others), as torch's own table totals it."""
    from torch.autograd import DeviceType
    return sum(ev.self_device_time_total for ev in prof.key_averages()
               if ev.device_type == DeviceType.CUDA and not ev.is_user_annotation) / 1e6


def one_group(widths):
    """packed_batch.decode_groups as it was: every decode row in one group, padded to the longest."""
    return None


def mixed_points(eng: LLMEngine, batches: list[int], contexts: list[int], steps: int, ops: bool,
                 warm: int) -> list[dict]:
    """One row of each context beside short rows (MIXED_SHORT tokens), with decode rows grouped by
    length and with one group padded to the longest row (the path before grouping), side by side."""
    rows, grouped = [], packed_batch.decode_groups
    for c in contexts:
        for b in batches:
            for label, fn in (("grouped", grouped), ("one group", one_group)):
                packed_batch.decode_groups = fn
                try:
                    rows.append({**profile_point(eng, [c] + [MIXED_SHORT] * (b - 1), steps, ops,
                                                                warm=warm), "decode": label})
                finally:
                    packed_batch.decode_groups = grouped
    return rows


def _op_groups(prof, forward_s: float) -> dict[str, float]:
    """Self CPU time of the forward's operators by group; the rest of the forward is 'other'."""
    groups: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        group = next((g for g, names in OP_GROUPS.items() if ev.key.startswith(names)), None)
        if group:
            groups[group] += ev.self_cpu_time_total / 1e6
    out = {g: groups.get(g, 0.0) for g in OP_GROUPS}
    out["other"] = max(0.0, forward_s - sum(out.values()))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--contexts", default="64,512")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warm-steps", type=int, default=16,
                    help="untimed decode steps first (0: time the batch's first steps, which run cold)")
    ap.add_argument("--per-step", action="store_true",
                    help="also print each timed step's host time, in us (the step less its forward call)")
    ap.add_argument("--mixed", action="store_true",
                    help=f"one row of each context beside {MIXED_SHORT}-token rows, decode rows grouped by "
                         "length and padded to the longest, side by side")
    ap.add_argument("--linear", default="auto",
                    help="comma-separated linear_backend values to profile one after the other (auto, torch, onednn)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--cuda-graphs", choices=tuple(SWITCH), default="auto")
    ap.add_argument("--torch-compile", choices=tuple(SWITCH), default="auto")
    ap.add_argument("--overlap", default="auto",
                    help="comma-separated EngineConfig.overlap values to profile one after the other (auto, on, off)")
    ap.add_argument("--no-ops", action="store_true",
                    help="time by wall clock alone: no torch.profiler, no forward split by operator")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="the requests' sampling temperature (0: greedy; not with --mixed)")
    ap.add_argument("--top-p", type=float, default=1.0, help="the requests' top_p (below 1: with --temperature)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--trace", default=None, metavar="DIR",
                    help="write each point's torch.profiler timeline here, the engine's phases labelled")
    args = ap.parse_args(argv)
    if args.trace is not None and (args.no_ops or args.mixed):
        ap.error("--trace records the profiler's timeline: not with --no-ops or --mixed")
    if args.mixed and args.temperature:
        ap.error("--mixed compares decode groups on greedy rows: not with --temperature")
    if args.top_p < 1.0 and not args.temperature:
        ap.error("--top-p: greedy rows take the argmax; give a --temperature too")
    batches = [int(x) for x in args.batches.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    rows = []
    for linear, overlap in ((lin, ov) for lin in args.linear.split(",") for ov in args.overlap.split(",")):
        eng = LLMEngine(EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                                     attention_backend=args.attention_backend, cuda_graphs=SWITCH[args.cuda_graphs],
                                     torch_compile=SWITCH[args.torch_compile], overlap=SWITCH[overlap],
                                     max_num_seqs=max(batches), max_num_batched_tokens=4096, linear_backend=linear))
        fill(eng, [16, 16], 2)  # warm-up
        for rid in list(eng.requests):
            eng.abort(rid)
        freeze_long_lived()  # as a lane does once its engine is loaded: no full collection walks the model
        if args.mixed:
            points = mixed_points(eng, batches, contexts, args.steps, not args.no_ops, args.warm_steps)
        else:
            points = [profile_point(eng, [c] * b, args.steps, not args.no_ops, trace_path(args.trace, eng, b, c),
                                    {"temperature": args.temperature, "top_p": args.top_p}, args.warm_steps)
                      for c in contexts for b in batches]
        rows += [{**p, "linear": eng.runner.linear, "attention": eng.runner.backend, "overlap": eng.overlap,
                  "cuda_graphs": eng.runner.graphs_state()} for p in points]
        dropped = weakref.ref(eng)
        del eng
        collect_dropped(dropped)  # (frozen with everything else: walked again only if cycles still hold it)
    print(render(rows, torch.get_num_threads()))
    if args.per_step:
        for r in rows:
            print(f"batch {r['batch']}, context {r['context']}: host us of each step after {r['warm_steps']} warm:",
                  " ".join(f"{us:.0f}" for us in r["host_us_each_step"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": torch.get_num_threads(), "rows": rows}, f, indent=1)


def render(rows: list[dict], threads: int) -> str:
    gpu = any(r["gpu_busy_ms"] for r in rows)
    ops = all(r["forward_ms"] for r in rows)
    groups = (*OP_GROUPS, "other") if ops else ()
    cols = ["linear", "overlap", *(["decode"] if rows and "decode" in rows[0] else []), "step",
            *(["gpu busy"] if gpu else []),
            "host", "host/row us", *PHASES, "event KB", "whole KB", *(f"fwd: {g}" for g in groups)]
    how = "forward split by operator self time" if ops else "wall clock, no profiler"
    lines = [f"decode step, ms per step ({threads} threads; host: the step less the "
             f"{'GPU busy time' if gpu else 'forward'}); {how}",
             "batch   ctx  " + "  ".join(f"{c:>{max(6, len(c))}}" for c in cols)]
    for r in rows:
        vals = [r["linear"], "on" if r.get("overlap") else "off", *([r["decode"]] if "decode" in r else []),
                f"{r['step_ms']:.2f}",
                *([f"{r['gpu_busy_ms']:.2f}"] if gpu else []), f"{r['host_ms']:.2f}", f"{r['host_us_per_row']:.1f}",
                *(f"{r['phases_ms'][p]:.2f}" for p in PHASES), f"{r['event_kb']:.1f}", f"{r['event_whole_kb']:.1f}",
                *(f"{r['forward_ms'][g]:.1f}" for g in groups)]
        cells = "  ".join(f"{v:>{max(6, len(c))}}" for c, v in zip(cols, vals))
        lines.append(f"{r['batch']:>5} {r['context']:>5}  {cells}")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
