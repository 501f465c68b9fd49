"""Which token ids end a sequence and which one pads: one rule for the engine and the benchmark's peers."""
from __future__ import annotations


def eos_token_ids(generation_config, tokenizer) -> frozenset[int]:
    """The generation config's EOS ids plus the tokenizer's EOS id."""
    ids = set()
    gen_eos = getattr(generation_config, "eos_token_id", None)
    for e in ([gen_eos] if isinstance(gen_eos, int) else gen_eos or []):
        ids.add(int(e))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def pad_token_id(tokenizer, eos_ids: frozenset[int]) -> int:
    """The tokenizer's pad token, else the smallest EOS id, else 0."""
    pad = tokenizer.pad_token_id
    return int(pad) if pad is not None else min(eos_ids, default=0)
