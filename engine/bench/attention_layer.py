"""python -m engine.bench.attention_layer: one layer's reference attention on decode rows, with its two output paths.

Times `paged_attention` (engine/model/attention.py) on decode rows of equal `--context`, in token order, by
wall clock: with BatchMeta.rows_in_order (each group's queries sliced, its output returned as it comes) and
without it (the queries gathered, the output scattered into a zeroed tensor: the path for rows out of order),
the two interleaved in one process, median of --rounds rounds of --calls calls, microseconds a call. The shape
is the default model's (SmolLM2-135M: 9 heads, 3 KV heads, head size 64, 30 layers), the block size 16.

    python -m engine.bench.attention_layer --rows 1,16 --context 128 [--rounds 30 --calls 200]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from ..model import attention

HEADS, KV_HEADS, HEAD_SIZE, LAYERS, BLOCK = 9, 3, 64, 30, 16


def layer_calls(rows: int, context: int) -> dict[bool, Callable]:
    """rows_in_order -> one layer's attention call on `rows` decode rows of `context` tokens."""
    width = -(-context // BLOCK)
    pool = SimpleNamespace(k=[torch.randn(rows * width + 1, BLOCK, KV_HEADS, HEAD_SIZE)],
                           v=[torch.randn(rows * width + 1, BLOCK, KV_HEADS, HEAD_SIZE)], block_size=BLOCK)
    query, key = torch.randn(1, HEADS, rows, HEAD_SIZE), torch.randn(1, KV_HEADS, rows, HEAD_SIZE)
    layer = SimpleNamespace(layer_idx=0)

    def call(in_order: bool):
        meta = attention.BatchMeta(pool=pool, num_tokens=rows, write_idx=None,
                                   write_slots=torch.arange(rows) * width * BLOCK + context - 1,
                                   decode_idx=torch.arange(rows),
                                   decode_blocks=torch.arange(rows * width).view(rows, width),
                                   decode_ctx=torch.full((rows,), context), prefills=[], rows_in_order=in_order)
        return lambda: attention.paged_attention(layer, query, key, key, None, scaling=HEAD_SIZE ** -0.5,
                                                 **{attention.META_KWARG: meta})
    return {flag: call(flag) for flag in (False, True)}


def time_paths(rows: int, context: int, rounds: int, calls: int) -> dict:
    fns, spent = layer_calls(rows, context), {False: [], True: []}
    with torch.inference_mode():
        for _ in range(rounds):
            for flag, fn in fns.items():
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                spent[flag].append(1e6 * (time.perf_counter() - t) / calls)
    scatter, in_order = statistics.median(spent[False]), statistics.median(spent[True])
    return {"rows": rows, "context": context, "scatter_us": scatter, "in_order_us": in_order,
            "saved_ms_a_step": (scatter - in_order) * LAYERS / 1000}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.attention_layer", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,16", help="comma-separated row counts")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    results = [time_paths(int(n), args.context, args.rounds, args.calls) for n in args.rows.split(",")]
    print(f"one layer's reference attention, us a call (median of {args.rounds} rounds of {args.calls})")
    print("rows  context  scatter  in order  saved a step over 30 layers")
    for r in results:
        print(f"{r['rows']:>4}  {r['context']:>7}  {r['scatter_us']:>7.1f}  {r['in_order_us']:>8.1f}"
              f"  {r['saved_ms_a_step']:>6.2f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
