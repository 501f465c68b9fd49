"""Rejection sampling of a draft row (speculative decoding with temperature > 0).

An n-gram draft proposes each token with certainty (its proposal distribution q is a point mass on the
draft token d). The standard acceptance rule, keep d with probability min(1, p(d) / q(d)) = p(d), and on
rejection draw from the residual max(0, p - q) renormalised (p without d), leaves every output token
distributed exactly as decoding one token at a time from p would (Leviathan et al. 2023, Chen et al.
2023). p is the row's own sampling distribution (temperature, top-k, top-p) at each position.
"""
from __future__ import annotations

import torch

from ..request import SamplingParams
from .sampler import _draw, _probabilities

NO_TOKEN = -1  # fills a row's picks after the token that ended it (ScheduledRow.num_samples per row)


def verify_draft(logits: torch.Tensor, draft: list[int], params: SamplingParams,
                 generator: torch.Generator | None) -> list[int]:
    """logits [k+1, V] at the row's last token and after each of its k drafts -> k+1 picks: the drafts
    kept, then the token drawn where one was rejected (never that draft) or after them all."""
    probs = _probabilities(logits.float(), [params] * logits.shape[0])
    u = torch.rand(len(draft), generator=generator, device=generator.device if generator else probs.device)
    for j, d in enumerate(draft):
        if u[j].item() < probs[j, d].item():
            continue
        residual = probs[j].clone()
        residual[d] = 0.0
        tok = _draw(residual[None], [generator]).item()  # p(d) < 1 here: some mass is left
        return draft[:j] + [tok] + [NO_TOKEN] * (len(draft) - j)
    return draft + [_draw(probs[-1:], [generator]).item()]
