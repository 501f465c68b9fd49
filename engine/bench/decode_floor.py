"""A decode step's time against the memory floor: python -m engine.bench.decode_floor

A decode step must read every weight once and every row's KV cache; no kernel can beat those bytes
divided by the device's copy bandwidth. For each batch size this fills an engine with `batch`
requests of `context` prompt tokens, times real engine steps that only decode (schedule to sampled
token, telemetry included), and divides by the floor: the step's bytes (engine/telemetry/roofline.step_work,
from the step's own event) over the copy bandwidth measured in the same run (device_peaks).

    python -m engine.bench.decode_floor --model random:Qwen2.5-0.5B-Instruct --dtype bfloat16 \
        --batches 1,16,64,256 --context 512 [--steps 16] [--overlap on,off] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, replace

import torch

from ..config import EngineConfig
from ..events import PREFILL
from ..kv.pool import blocks_for
from ..llm_engine import LLMEngine
from ..telemetry.device_peaks import measure_peaks
from ..telemetry.roofline import ModelCost, step_work
from .config import SWITCH
from .step_profile import fill, fill_steps
from .suite import host_info


def floor_point(eng: LLMEngine, cost: ModelCost, peaks, batch: int, context: int, steps: int) -> dict:
    """Median decode-only step of `batch` rows holding `context` tokens, and its floors."""
    fill(eng, [context] * batch, steps)
    times, work = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        ev = eng.step()
        times.append(time.perf_counter() - t0)
        if len(ev.entries) != batch or any(e.phase == PREFILL for e in ev.entries):
            raise RuntimeError(f"step {ev.step} did not decode all {batch} rows")
        work.append(step_work(cost, ev.entries, len(ev.sampled)))
    for rid in list(eng.requests):
        eng.abort(rid)
    step_s = statistics.median(times)
    flops, moved = work[len(work) // 2]  # grows by one token per row a step: the middle step's
    mem_floor = moved / peaks.bytes_per_s
    return {"batch": batch, "context": context, "steps": steps, "step_ms": 1e3 * step_s,
            "bytes": moved, "flops": flops, "memory_floor_ms": 1e3 * mem_floor,
            "compute_floor_ms": 1e3 * flops / peaks.flops_per_s, "x_memory_floor": step_s / mem_floor,
            "achieved_bytes_per_s": moved / step_s}


def run(model: str | None, device: str, dtype: str, attention_backend: str, batches: list[int], context: int,
        steps: int, cuda_graphs: bool | None = None, torch_compile: bool | None = None,
        overlaps: tuple[bool | None, ...] = (None,)) -> dict:
    """overlaps: one engine per EngineConfig.overlap value (the later ones on the first's weights), each
    batch size measured on each in turn: side by side in one run."""
    largest, budget = max(batches), max(8192, 2 * max(batches))
    row_len = context + steps + 2 + fill_steps(budget, [context] * largest)  # what fill() asks for
    cfg = EngineConfig(model=model, device=device, dtype=dtype, attention_backend=attention_backend,
                       cuda_graphs=cuda_graphs, torch_compile=torch_compile, max_model_len=row_len, max_num_seqs=largest,
                       max_num_batched_tokens=budget, num_kv_blocks=largest * blocks_for(row_len, 16), block_size=16)
    engines = []
    for overlap in overlaps:
        engines.append(LLMEngine(replace(cfg, overlap=overlap), share_weights_with=engines[0] if engines else None))
        fill(engines[-1], [16, 16], 2)  # warm-up: kernels compiled, allocator primed
        for rid in list(engines[-1].requests):
            engines[-1].abort(rid)
    runner = engines[0].runner
    cost = ModelCost.from_hf_config(runner.hf_config, runner.dtype)
    peaks = measure_peaks(runner.device, runner.dtype, runner.linear)  # this run's, not the cached ones
    rows = [{**floor_point(eng, cost, peaks, b, context, steps), "overlap": eng.overlap}
            for b in batches for eng in engines]
    config = {"model": cfg.model, "device": str(runner.device), "dtype": str(runner.dtype),
              "attention_backend": runner.backend, "linear": runner.linear, "cuda_graphs": runner.graphs_state(),
              "overlap": [eng.overlap for eng in engines], "context": context, "steps": steps, "host": host_info()}
    return {"config": config, "peaks": asdict(peaks), "weight_bytes": cost.weight_bytes,
            "kv_bytes_per_token": cost.kv_bytes_per_token, "rows": rows}


def render(result: dict) -> str:
    p, c = result["peaks"], result["config"]
    graphs = f", CUDA graphs {c['cuda_graphs']}" if c["cuda_graphs"] != "off" else ""
    lines = [f"{c['model']} {c['dtype']} on {p['device']} ({c['attention_backend']} attention{graphs}): "
             f"copy {p['bytes_per_s'] / 1e9:.1f} GB/s, matmul {p['flops_per_s'] / 1e12:.2f} TFLOP/s; "
             f"weights {result['weight_bytes'] / 2**20:.0f} MiB",
             f"{'batch':>5} {'ctx':>5} {'overlap':>7} {'step ms':>8} {'MiB/step':>9} {'mem floor':>10} "
             f"{'x floor':>8} {'GB/s':>7} {'flop floor':>11}"]
    for r in result["rows"]:
        overlap = {True: "on", False: "off"}.get(r.get("overlap"), "-")
        lines.append(f"{r['batch']:>5} {r['context']:>5} {overlap:>7} {r['step_ms']:>8.2f} {r['bytes'] / 2**20:>9.1f} "
                     f"{r['memory_floor_ms']:>8.2f}ms {r['x_memory_floor']:>7.2f}x "
                     f"{r['achieved_bytes_per_s'] / 1e9:>7.1f} {r['compute_floor_ms']:>9.2f}ms")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--cuda-graphs", choices=tuple(SWITCH), default="auto")
    ap.add_argument("--torch-compile", choices=tuple(SWITCH), default="auto")
    ap.add_argument("--overlap", default="auto",
                    help="auto | on | off, or several (on,off): an engine each, measured side by side")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    with torch.inference_mode():
        result = run(args.model, args.device, args.dtype, args.attention_backend,
                     [int(x) for x in args.batches.split(",")], args.context, args.steps,
                     SWITCH[args.cuda_graphs], SWITCH[args.torch_compile],
                     tuple(SWITCH[x] for x in args.overlap.split(",")))
    print(render(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
