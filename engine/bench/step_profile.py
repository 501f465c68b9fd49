"""Where one engine step's time goes, on this machine: python -m engine.bench.step_profile

For each (batch, context) it fills an engine with `batch` requests whose contexts are `context` tokens,
then times decode-only steps, split into the engine's phases (schedule, batch build, forward, sampling,
update + detokenize, telemetry) and the forward's operators (linear layers, K/V gather, attention, K/V
write, the rest), from torch.profiler. Every step is a real engine step; the phases are timed by
wrapping the engine's own methods, so nothing here re-implements the engine.

    python -m engine.bench.step_profile --batches 1,8,32 --contexts 64,512 [--steps 8] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from ..config import EngineConfig
from ..llm_engine import LLMEngine
from ..model import runner as runner_module
from ..request import SamplingParams

# aten operators -> the part of the forward they belong to
OP_GROUPS = {
    "linear layers": ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul"),
    "K/V gather": ("aten::index_select",),
    "attention": ("aten::_scaled_dot_product", "aten::scaled_dot_product", "aten::_softmax", "aten::softmax"),
    "K/V write": ("aten::index_copy_",),
}
PHASES = ("schedule", "batch build", "forward", "sampling", "update + detokenize", "telemetry")


class PhaseTimer:
    """Wraps the engine's methods so each step's time is split by phase (seconds, summed)."""

    def __init__(self, eng: LLMEngine):
        self.total: dict[str, float] = defaultdict(float)
        self._wrap(eng.scheduler, "schedule", "schedule")
        self._wrap(eng.runner.model, "forward", "forward")
        self._wrap(eng, "_update", "update + detokenize")
        self._wrap(eng, "_event", "telemetry")
        self._wrap(runner_module, "sample", "sampling")
        self._wrap(eng.runner, "execute", "execute")  # batch build = execute - forward - sampling

    def _wrap(self, obj, name: str, phase: str) -> None:
        fn = getattr(obj, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.total[phase] += time.perf_counter() - t
        setattr(obj, name, timed)

    def phases(self) -> dict[str, float]:
        t = dict(self.total)
        t["batch build"] = t.pop("execute", 0.0) - t.get("forward", 0.0) - t.get("sampling", 0.0)
        return {p: t.get(p, 0.0) for p in PHASES}


def fill(eng: LLMEngine, batch: int, context: int, steps: int) -> None:
    """Add `batch` requests of `context` prompt tokens and step until all of them decode."""
    params = SamplingParams(max_tokens=steps + 2, temperature=0.0, ignore_eos=True)
    for i in range(batch):
        eng.add_request([20 + (i * 37 + 11 * k) % 200 for k in range(context)], params)
    while any(not r.output_token_ids for r in eng.requests.values()):
        eng.step()


def profile_point(eng: LLMEngine, batch: int, context: int, steps: int) -> dict:
    fill(eng, batch, context, steps)
    timer = PhaseTimer(eng)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            eng.step()
        wall = time.perf_counter() - t0  # before the profiler's own processing at exit
    for rid in list(eng.requests):
        eng.abort(rid)
    ops = _op_groups(prof, timer.total["forward"])
    return {"batch": batch, "context": context, "steps": steps, "step_ms": 1e3 * wall / steps,
            "phases_ms": {k: 1e3 * v / steps for k, v in timer.phases().items()},
            "forward_ms": {k: 1e3 * v / steps for k, v in ops.items()}}


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
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    batches = [int(x) for x in args.batches.split(",")]
    eng = LLMEngine(EngineConfig(model=args.model, device="cpu", max_num_seqs=max(batches),
                                 max_num_batched_tokens=4096))
    fill(eng, 2, 16, 2)  # warm-up
    for rid in list(eng.requests):
        eng.abort(rid)
    rows = [profile_point(eng, b, c, args.steps) for c in (int(x) for x in args.contexts.split(","))
            for b in batches]
    print(render(rows, torch.get_num_threads()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": torch.get_num_threads(), "rows": rows}, f, indent=1)


def render(rows: list[dict], threads: int) -> str:
    cols = [*PHASES, *(f"fwd: {g}" for g in (*OP_GROUPS, "other"))]
    lines = [f"decode step, ms per step ({threads} threads); forward split by operator self time",
             "batch  ctx   step  " + "  ".join(f"{c:>{max(6, len(c))}}" for c in cols)]
    for r in rows:
        vals = [*(r["phases_ms"][p] for p in PHASES), *(r["forward_ms"][g] for g in (*OP_GROUPS, "other"))]
        lines.append(f"{r['batch']:>5} {r['context']:>4} {r['step_ms']:6.1f}  "
                     + "  ".join(f"{v:>{max(6, len(c))}.1f}" for c, v in zip(cols, vals)))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
