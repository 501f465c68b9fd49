"""What throughput costs: a price per device hour turned into dollars per million output tokens.

The price is the user's (a cloud rental, or a share of a machine's cost); the default is a
round figure of the order of an on-demand cloud GPU, chosen so the numbers read as money, not as
a quote. Set INFLIGHT_PRICE_PER_HOUR (or --price-per-hour, or the number in the UI) to yours.
"""
from __future__ import annotations

import os

from ..untrusted import is_number

DEFAULT_PRICE_PER_HOUR = 2.0  # US dollars per device hour
PRICE_ENV = "INFLIGHT_PRICE_PER_HOUR"


def check_price(price) -> float:
    """A price per hour as a float; ValueError unless it is a finite number >= 0."""
    ok = is_number(price) and price >= 0
    if not ok:
        raise ValueError(f"the price per device hour must be a number >= 0 (dollars), got {price!r}")
    return float(price)


def default_price_per_hour(environ=os.environ) -> float:
    """$INFLIGHT_PRICE_PER_HOUR, else DEFAULT_PRICE_PER_HOUR."""
    text = environ.get(PRICE_ENV, "").strip()
    if not text:
        return DEFAULT_PRICE_PER_HOUR
    try:
        return check_price(float(text))
    except ValueError:
        raise ValueError(f"{PRICE_ENV} must be a number >= 0 (dollars per device hour), got {text!r}") from None


def usd_per_million_tokens(tokens_per_s: float | None, price_per_hour: float) -> float | None:
    """Dollars per million tokens at this throughput with the device at this price (None when
    nothing was produced)."""
    if tokens_per_s is None or not tokens_per_s > 0:
        return None
    return price_per_hour / 3600.0 / tokens_per_s * 1e6
