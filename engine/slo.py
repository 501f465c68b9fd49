"""Latency SLOs: whether a finished request met them (goodput counts those, DistServe's definition).

An unset SLO always holds; a request of one token has no time per output token and meets that part.
"""
from __future__ import annotations


def tpot_s(first_token_s: float | None, finish_s: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first; None without a second token."""
    if first_token_s is None or finish_s is None or output_tokens < 2:
        return None
    return (finish_s - first_token_s) / (output_tokens - 1)


def meets_slo(ttft: float | None, tpot: float | None, slo_ttft_s: float | None, slo_tpot_s: float | None) -> bool:
    ok_ttft = slo_ttft_s is None or (ttft is not None and ttft <= slo_ttft_s)
    ok_tpot = slo_tpot_s is None or tpot is None or tpot <= slo_tpot_s
    return ok_ttft and ok_tpot
