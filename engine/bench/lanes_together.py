"""Two lanes on one machine: each lane's decode step alone and beside the other, with the CPU cores
shared between lanes stepping together (engine/cpu_share.py) and without.

    python -m engine.bench.lanes_together [--model M] [--device cuda] [--lanes continuous,static] [--batch 8]

Each round, for sharing off then on (on a GPU once: cores are shared only on the CPU): the same
burst (`batch` requests, `tokens` tokens each, EOS ignored) on the first lane alone, on the second
alone, then on both at once, through the service as the app runs them. A lane's decode step is the
median duration of its steps without a prefill; the ratio together / alone is what one lane pays for
the other. Medians over rounds.
"""
from __future__ import annotations

import argparse
import json
import statistics

from ..config import EngineConfig
from ..cpu_share import CORES
from ..events import PREFILL, StepMessage
from ..request import SamplingParams
from ..serving.service import EngineService
from ..workshop.scenarios.model import prompt_ids
from .suite import host_info

PROMPT_LEN = 24


def decode_steps_ms(svc: EngineService, cursor: int, lanes: list[str]) -> dict[str, float]:
    """Median decode-step duration per lane among the step events since cursor."""
    steps: dict[str, list[float]] = {lane: [] for lane in lanes}
    for _, msg in svc.hub.read(cursor).events:
        if isinstance(msg, StepMessage) and msg.lane in steps:
            ev = msg.event
            if ev.entries and all(e.phase != PREFILL for e in ev.entries):
                steps[msg.lane].append(1e3 * ev.duration_s)
    return {lane: statistics.median(v) if v else float("nan") for lane, v in steps.items()}


def burst(svc: EngineService, lanes: list[str], batch: int, tokens: int) -> dict[str, float]:
    cursor = svc.hub.head
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    handles = [h for i in range(batch)
               for h in svc.submit(prompt_ids(PROMPT_LEN, i), params,
                                   lanes=lanes, tag="bench")]
    for h in handles:
        h.result(600)
    return decode_steps_ms(svc, cursor, lanes)


def measure(svc: EngineService, names: list[str], batch: int, tokens: int, rounds: int,
            modes: tuple[str, ...] = ("off", "on")) -> dict:
    runs: dict[str, dict[str, list[float]]] = {mode: {f"{n} {p}": [] for n in names for p in ("alone", "together")}
                                               for mode in modes}
    for _ in range(rounds):
        for mode in modes:
            CORES.enabled = mode == "on"
            for name in names:
                runs[mode][f"{name} alone"].append(burst(svc, [name], batch, tokens)[name])
            for name, ms in burst(svc, names, batch, tokens).items():
                runs[mode][f"{name} together"].append(ms)
    return {mode: {k: statistics.median(v) for k, v in r.items()} for mode, r in runs.items()}


def render(result: dict, names: list[str]) -> str:
    lines = ["median decode step (ms): lane alone, beside the other, ratio",
             f"{'lane':<14}{'cores shared':>13}{'alone':>9}{'together':>10}{'ratio':>8}"]
    for mode in result:
        for n in names:
            a, t = result[mode][f"{n} alone"], result[mode][f"{n} together"]
            lines.append(f"{n:<14}{mode:>13}{a:>9.1f}{t:>10.1f}{t / a:>7.2f}x")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--lanes", default="continuous,static", help="two strategies, each a lane")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    names = args.lanes.split(",")
    base = EngineConfig(model=args.model, device=args.device, dtype=args.dtype,
                        attention_backend=args.attention_backend, static_batch_size=args.batch,
                        max_num_seqs=max(16, args.batch), static_max_wait_s=0.0)
    modes = ("off", "on") if args.device == "cpu" else ("on",)
    svc = EngineService(base, strategies=names)
    try:
        svc.wait_ready(600)
        burst(svc, names, args.batch, 4)  # warm-up (a full batch: static launches only those)
        result = measure(svc, names, args.batch, args.tokens, args.rounds, modes)
    finally:
        svc.stop()
        CORES.enabled = True
    print(f"{args.device}, cores: {CORES.cores}; {args.batch} requests x {args.tokens} tokens; {args.rounds} rounds")
    print(render(result, names))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "host": host_info(), "cores": CORES.cores, "batch": args.batch,
                       "tokens": args.tokens, "rounds": args.rounds, "median_decode_step_ms": result}, f, indent=1)


if __name__ == "__main__":
    main()
