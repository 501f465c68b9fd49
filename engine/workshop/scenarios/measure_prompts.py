"""Measure how long the default model's own answer to each bundled prompt is, and write it into
assets/prompts.jsonl as `answer_tokens` (greedy, stopped at EOS or at --max-tokens).

    python -m engine.workshop.scenarios.measure_prompts [--model M] [--max-tokens 320]

Scenarios use it to pick prompts whose answer runs past the length a lesson needs (prompts.py).
"""
from __future__ import annotations

import argparse
import json

from ...config import EngineConfig
from ...llm_engine import LLMEngine
from ...request import SamplingParams
from ..prompts import PROMPTS_PATH, load_prompts


def answer_lengths(eng: LLMEngine, prompts: list[str], max_tokens: int) -> list[int]:
    """Tokens each greedy answer has before the model ends it (max_tokens where it does not)."""
    ids = [eng.chat_prompt([{"role": "user", "content": p}]) for p in prompts]
    outs = eng.generate(ids, SamplingParams(max_tokens=max_tokens, temperature=0.0))
    return [len(o.output_token_ids) - (o.finish_reason == "stop") for o in outs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="hub id or local directory (default: the default model)")
    ap.add_argument("--max-tokens", type=int, default=320)
    args = ap.parse_args(argv)
    rows = load_prompts()
    eng = LLMEngine(EngineConfig(model=args.model, device="cpu", dtype="float32", max_model_len=2048,
                                 kv_cache_memory_gb=0.5, max_num_seqs=16))
    lengths = answer_lengths(eng, [r["prompt"] for r in rows], args.max_tokens)
    with open(PROMPTS_PATH, "w", encoding="utf-8") as f:
        for row, n in zip(rows, lengths):
            f.write(json.dumps({**row, "answer_tokens": n}, ensure_ascii=False) + "\n")
    print(f"{len(rows)} prompts: answers of {min(lengths)} to {max(lengths)} tokens "
          f"({sum(n >= args.max_tokens for n in lengths)} reach {args.max_tokens}) -> {PROMPTS_PATH.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
