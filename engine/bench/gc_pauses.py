"""Python's full collections while an engine serves: python -m engine.bench.gc_pauses

Runs the same workload twice on one engine (requests of random lengths on `rows` rows, every step event
kept in a ring of the service's size with its wire JSON built, as the socket builds it), first as a
process does by default and then with what lives long frozen (engine/gc_pauses.py, as a lane does once
its engine is loaded), and reports each run's full (generation 2) collections: how many, their total and
their longest, in milliseconds. The service and its web server are imported first, as the app holds them.

    python -m engine.bench.gc_pauses --model DIR [--rows 256] [--requests 2048] [--max-tokens 128]
"""
from __future__ import annotations

import argparse
import gc
import random
import time
from collections import deque

from ..config import EngineConfig
from ..events import StepMessage
from ..gc_pauses import freeze_long_lived
from ..llm_engine import LLMEngine
from ..request import SamplingParams

RING = 2048  # the service's hub (engine/serving/service.py hub_capacity)


class FullCollections:
    """Times every generation-2 collection while it is entered (gc.callbacks)."""

    def __init__(self):
        self.pauses: list[float] = []
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif info["generation"] == 2:
            self.pauses.append(time.perf_counter() - self._t0)

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def serve(eng: LLMEngine, requests: int, max_tokens: int, seed: int = 0) -> dict:
    """Every request through the engine, its events kept as the hub keeps them; the run's full collections."""
    rng, ring = random.Random(seed), deque(maxlen=RING)
    for _ in range(requests):
        prompt = [rng.randrange(3, 200) for _ in range(rng.randint(8, 64))]
        eng.add_request(prompt, SamplingParams(max_tokens=rng.randint(8, max_tokens), ignore_eos=True))
    steps, t0 = 0, time.perf_counter()
    with FullCollections() as full:
        while eng.has_unfinished():
            msg = StepMessage(event=eng.step())
            msg.json()  # the wire form every reader shares, built once
            ring.append(msg)
            for rid in msg.event.finished:
                eng.pop_output(rid)
            steps += 1
    return {"steps": steps, "seconds": time.perf_counter() - t0, "full_collections": len(full.pauses),
            "pause_ms_total": 1e3 * sum(full.pauses), "pause_ms_max": 1e3 * max(full.pauses, default=0.0)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args(argv)
    from ..api import server  # noqa: F401 - the app process holds the service, its server and their modules
    cfg = EngineConfig(max_num_seqs=args.rows, num_kv_blocks=args.rows * 16, max_num_batched_tokens=8192,
                       **({"model": args.model} if args.model else {}))
    eng = LLMEngine(cfg)
    print(f"{len(gc.get_objects())} objects tracked after loading")
    print("run        steps  seconds  full collections  pauses ms (total, longest)")
    for name, prepare in (("default", gc.collect), ("frozen", freeze_long_lived)):
        prepare()
        r = serve(eng, args.requests, args.max_tokens)
        print(f"{name:8s} {r['steps']:7d} {r['seconds']:8.2f} {r['full_collections']:17d}  "
              f"{r['pause_ms_total']:9.0f} {r['pause_ms_max']:8.0f}")


if __name__ == "__main__":
    main()
