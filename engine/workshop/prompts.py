"""The bundled prompts (assets/prompts.jsonl): questions a model answers in language, each with the length
of the default model's greedy answer before it stops by itself (`answer_tokens`, measured by
`python -m engine.workshop.scenarios.measure_prompts`).

Scenarios ignore EOS so that every answer has the length its lesson needs; past its own end a model
writes a made-up next turn ("system ... user ..."), which reads as a broken model on a projector. So a
scenario takes, for an answer of N tokens, only prompts whose own answer runs well past N: the text is
then always the model's answer, cut where the lesson needs it.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..paths import ASSETS

PROMPTS_PATH = ASSETS / "prompts.jsonl"
EDIT_PROMPTS_PATH = ASSETS / "edit_prompts.jsonl"  # copy or edit a passage given in the prompt
MARGIN = 1.25         # a prompt serves an answer of N tokens when its own answer is at least this x N
JOIN_HEAD = "Answer each of these questions in a few sentences:"


def load_prompts(path: str | Path = PROMPTS_PATH) -> list[dict]:
    """The bundled prompt set: dicts with id, category, prompt (and answer_tokens once measured)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        raise ValueError(f"no prompts in {path}")
    return rows


def long_enough(pool: list[dict], max_tokens: int) -> list[dict]:
    """The prompts whose own answer runs past max_tokens (with MARGIN), longest answer first; ValueError
    if none does."""
    ok = [p for p in pool if p.get("answer_tokens", 0) >= MARGIN * max_tokens]
    if not ok:
        raise ValueError(f"no bundled prompt has an answer of {MARGIN * max_tokens:.0f} tokens or more")
    return sorted(ok, key=lambda p: (-p["answer_tokens"], p["id"]))


def message(pool: list[dict], max_tokens: int, index: int, join: int = 1) -> str:
    """The index-th user message of a group whose answers are max_tokens long: one prompt, or `join` of
    them as a numbered list (a longer prompt). Deterministic: the same index, the same text."""
    ok = long_enough(pool, max_tokens)
    picked = [ok[(index * join + k) % len(ok)]["prompt"] for k in range(join)]
    if join == 1:
        return picked[0]
    return "\n".join([JOIN_HEAD, *(f"{k + 1}. {q}" for k, q in enumerate(picked))])
