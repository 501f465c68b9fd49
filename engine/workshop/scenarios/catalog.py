"""The shipped scenarios (assets/scenarios/, read once per process) and lookups over them."""
from __future__ import annotations

import functools

from ...untrusted import is_int
from .loader import load_scenarios
from .model import Scenario


@functools.cache
def shipped() -> tuple[Scenario, ...]:
    return load_scenarios()


def by_title(title: str) -> Scenario | None:
    return next((s for s in shipped() if s.title == title), None)


def by_number(n: int) -> Scenario:
    """The n-th scenario, from 1 (the keyboard's 1-9); ValueError when there is none."""
    scenarios = shipped()
    if not is_int(n) or not 1 <= n <= len(scenarios):
        raise ValueError(f"scenario must be a number from 1 to {len(scenarios)}, got {n!r}")
    return scenarios[n - 1]


def running_scenario(lanes: dict, base) -> Scenario | None:
    """The scenario whose lanes are exactly what runs (names, order and settings), else None."""
    return next((s for s in shipped() if s.runs_on(lanes, base)), None)
