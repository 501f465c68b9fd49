"""python -m engine.bench.nucleus_sizes: how many tokens a top-p nucleus holds on a model's own logits.

The sampler looks at each top-p row's NUCLEUS_CANDIDATES most likely tokens first and sorts the whole
vocabulary only for a row whose nucleus goes on past them (engine/model/sampler.py). This says how often that
happens: it samples answers to a few chat prompts with transformers' generate() (temperature 0.8, top_p 0.95,
seed 0), keeps each step's logits, and for each (temperature, top_p) gives the nucleus's size (median, 90th
percentile, largest) and the share of steps whose nucleus is larger than NUCLEUS_CANDIDATES.

    python -m engine.bench.nucleus_sizes [--model DIR] [--tokens 48]
"""
from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ..config import EngineConfig
from ..model.files.loader import resolve_model_dir
from ..model.sampler import NUCLEUS_CANDIDATES

PROMPTS = ("Write a short story about a robot learning to paint.", "Explain how a paged KV cache works.",
           "List five fruits and their colors.", "What is the capital of France? Answer in one sentence.")
SETTINGS = ((0.8, 0.9), (0.8, 0.95), (1.0, 0.9), (1.0, 0.95))  # (temperature, top_p)


def step_logits(model_dir, tokens: int) -> list[torch.Tensor]:
    """Each generated step's logits [vocab], over the answers to PROMPTS."""
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir).eval()
    torch.manual_seed(0)
    out = []
    for prompt in PROMPTS:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                      return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=tokens, do_sample=True, temperature=0.8, top_p=0.95,
                                 output_logits=True, return_dict_in_generate=True)
        out += [lg[0].float() for lg in gen.logits]
    return out


def nucleus_size(logits: torch.Tensor, temperature: float, top_p: float) -> int:
    """Tokens whose probability mass before them (most likely first) is below top_p, as the sampler keeps."""
    probs = (logits / temperature).softmax(-1).sort(descending=True).values
    return int(((probs.cumsum(-1) - probs) < top_p).sum())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m engine.bench.nucleus_sizes", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=EngineConfig().model)
    ap.add_argument("--tokens", type=int, default=48, help="tokens generated a prompt")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    steps = step_logits(resolve_model_dir(args.model), args.tokens)
    results = []
    for temperature, top_p in SETTINGS:
        sizes = sorted(nucleus_size(lg, temperature, top_p) for lg in steps)
        past = sum(s > NUCLEUS_CANDIDATES for s in sizes) / len(sizes)
        results.append({"temperature": temperature, "top_p": top_p, "steps": len(sizes),
                        "median": sizes[len(sizes) // 2], "p90": sizes[int(0.9 * (len(sizes) - 1))],
                        "max": sizes[-1], "share_past_candidates": past})
    print(f"{args.model}: nucleus sizes over {len(steps)} steps of answers to {len(PROMPTS)} chat prompts")
    print(f"temperature  top_p  median  p90  max  past {NUCLEUS_CANDIDATES}")
    for r in results:
        print(f"{r['temperature']:>11}  {r['top_p']:>5}  {r['median']:>6}  {r['p90']:>4}  {r['max']:>5}"
              f"  {100 * r['share_past_candidates']:.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
