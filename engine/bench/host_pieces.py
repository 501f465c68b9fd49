"""The host's pieces of one decode-only step, each timed alone: python -m engine.bench.host_pieces --model DIR

Fills an engine with `--rows` requests of `--context` tokens until all of them decode, schedules one more
step, and times each piece of its host work on that step (timeit: best of --repeat rounds of --number calls,
microseconds a call): building its batch (`batch_for`), that and its upload (what an eager forward sends),
staging it into the decode graphs' inputs of its bucket (what a GPU step does before its graph replays;
graphs built here, never captured or run), and sampling its rows (greedy, random logits). step_profile
times whole steps, where this machine's noise (~0.3 ms) hides changes of tens of microseconds; these pieces
are what such changes are measured on, side by side (a git worktree for each side). `build + upload, after a
forward` is what a CPU step pays for them: each call just after the model's forward on the batch (untimed; the
best of --repeat means of --number / 5 calls), 3-4x their time alone on a 2-core AMD EPYC, with one thread as
with two and under one page fault a step: the forward leaves the CPU's caches cold for the host's code and data.
`going on` times the same for a batch that goes on from the step before's (the steady state: the same requests a
token further; DecodeBatch.goes_on_to), its inputs written into that one's tensors.

    python -m engine.bench.host_pieces --model DIR --rows 1,256 --context 128
"""
from __future__ import annotations

import argparse
import json
import time
import timeit

import torch

from ..config import EngineConfig
from ..gc_pauses import freeze_long_lived
from ..kv.pool import blocks_for
from ..llm_engine import LLMEngine
from ..model.decode_batch import DecodeBatch, DecodeTail
from ..model.runner import batch_for, sample_rows
from .step_profile import fill

PIECES = ("build", "build + upload", "build + stage", "sampling", "build + upload, after a forward",
          "going on: build + upload", "going on, after a forward")


def time_pieces(eng: LLMEngine, rows: int, context: int, number: int, repeat: int) -> dict[str, float]:
    """Microseconds a call of each piece on one scheduled decode step of `rows` rows."""
    from ..model.decode_graphs import DecodeGraphs, buckets  # imports triton
    fill(eng, [context] * rows, 2)
    step = eng.scheduler.schedule().rows
    runner, cache = eng.runner, eng.cache
    graphs = DecodeGraphs(runner, rows, blocks_for(eng.max_model_len, cache.block_size), capture=False)
    bucket = next(b for b in buckets(rows) if b >= rows)
    logits, before = torch.randn(rows, runner.vocab_size), step_before(DecodeBatch(runner, cache, step))
    calls = {"build": lambda: batch_for(runner, cache, step),
             "build + upload": lambda: batch_for(runner, cache, step).upload(),
             "build + stage": lambda: graphs._stage(batch_for(runner, cache, step), bucket),
             "sampling": lambda: sample_rows(logits, step).tolist(),
             "going on: build + upload": lambda: DecodeBatch(runner, cache, step, before).upload()}
    with torch.inference_mode():
        out = {k: 1e6 * min(timeit.repeat(f, number=number, repeat=repeat)) / number for k, f in calls.items()}
        # (a fifth of the calls: each runs a forward first)
        for piece, last in (("build + upload, after a forward", None), ("going on, after a forward", before)):
            calls_after = (_after_forward(runner, cache, step, max(1, number // 5), last) for _ in range(repeat))
            out[piece] = 1e6 * min(calls_after)
    eng.scheduler.on_step_done()
    for rid in list(eng.requests):
        eng.abort(rid)
    return out


def step_before(batch: DecodeBatch) -> DecodeTail:
    """The tail of the decode-only batch the step before `batch`'s would have had (its rows a token behind), its
    inputs uploaded: a batch built from `batch`'s rows with it as `last` goes on from it, every call (on the
    CPU, into its tensors)."""
    batch.upload()
    tail = batch.tail
    tail.next_positions, tail.write_slots = batch.positions, batch.write_slots - 1  # (slots: where no block starts)
    return tail


def _after_forward(runner, cache, step, number: int, last: DecodeTail | None) -> float:
    """Seconds a call of build + upload, each call just after a forward on the batch (the forward untimed);
    last: the batch it goes on from (None: batch_for's)."""
    spent = 0.0
    for _ in range(number):
        runner.forward(batch_for(runner, cache, step))
        t = time.perf_counter()
        (batch_for(runner, cache, step) if last is None else DecodeBatch(runner, cache, step, last)).upload()
        spent += time.perf_counter() - t
    return spent / number


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.host_pieces", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rows", default="1,256", help="comma-separated row counts")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--number", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.rows.split(",")]
    eng = LLMEngine(EngineConfig(model=args.model, device="cpu", max_num_seqs=max(counts),
                                 max_num_batched_tokens=4096))
    freeze_long_lived()  # as a lane does once its engine is loaded
    rows = [{"rows": n, **time_pieces(eng, n, args.context, args.number, args.repeat)} for n in counts]
    print("decode-only step's host pieces, us a call (best of %d x %d)" % (args.repeat, args.number))
    print("rows  " + "  ".join(f"{p:>14}" for p in PIECES))
    for r in rows:
        print(f"{r['rows']:>4}  " + "  ".join(f"{r[p]:>{max(14, len(p))}.1f}" for p in PIECES))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
