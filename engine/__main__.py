"""python -m engine "prompt": stream one answer and print one line per engine iteration."""
from __future__ import annotations

import argparse
import sys

from .config import STRATEGIES, EngineConfig, default_model
from .events import StepEvent
from .llm_engine import LLMEngine
from .request import SamplingParams


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    ap.add_argument("prompt", help="the user message (sent through the chat template unless --raw)")
    ap.add_argument("--model", default=None, help=f"hub id or local directory (default: {default_model()})")
    ap.add_argument("--strategy", default="continuous", choices=STRATEGIES)
    ap.add_argument("--device", default=None, help="auto | cpu | cuda (default: $INFLIGHT_DEVICE or auto)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    ap.add_argument("--quiet", action="store_true", help="only the answer, no per-iteration lines")
    return ap.parse_args(argv)


def describe(ev: StepEvent, delta: str) -> str:
    phases = {}
    for e in ev.entries:
        phases[e.phase] = phases.get(e.phase, 0) + e.num_tokens
    what = " ".join(f"{k} {v}" for k, v in phases.items()) or "idle"
    return (f"step {ev.step:4d} | {what:<14} | kv {ev.used_blocks}/{ev.num_blocks} blocks | "
            f"{1000 * ev.duration_s:7.1f} ms | {delta!r}")


def main(argv=None) -> int:
    args = parse_args(argv)
    progress = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    try:
        cfg = EngineConfig(model=args.model, strategy=args.strategy, device=args.device)
        eng = LLMEngine(cfg, progress=progress)
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                                top_k=args.top_k, seed=args.seed)
        use_chat = not args.raw and eng.tokenizer.chat_template
        prompt = eng.chat_prompt([{"role": "user", "content": args.prompt}]) if use_chat else args.prompt
        rid = eng.add_request(prompt, params)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    eng.draining = True  # a lone request: static batching launches it anyway
    shown = 0
    while eng.has_unfinished():
        ev = eng.step()
        text = eng.get_output(rid).text
        delta, shown = text[shown:], len(text)
        if args.quiet:
            print(delta, end="", flush=True)
        else:
            print(describe(ev, delta), flush=True)
    out = eng.get_output(rid)
    if not args.quiet:
        print(f"\n{out.text}")
        n = len(out.output_token_ids)
        dur = out.finish_s - out.arrival_s
        print(f"\n[{n} tokens in {dur:.2f} s, {n / dur:.1f} tok/s, finish: {out.finish_reason}, "
              f"TTFT {1000 * (out.first_token_s - out.arrival_s):.0f} ms]", file=sys.stderr)
    else:
        print()
    return 0 if out.finish_reason != "error" else 1


if __name__ == "__main__":
    sys.exit(main())
