"""Paused time from the service's events: checked against a brute-force timeline over random sessions of
pauses, resumes and single steps (several lanes' steps overlapping)."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from engine.telemetry.pauses import Pauses
from engine.events import PAUSED, RESUMED, StatusEvent, StepMessage

DT = 0.01  # the brute force's grid


def session(rng: random.Random) -> tuple[list, list[tuple[float, float]]]:
    """Hub items in time order, and the intervals that were truly paused (not computing)."""
    t, items, paused, truth = 0.0, [], False, []
    for _ in range(rng.randint(1, 12)):
        t += rng.randint(1, 30) * DT
        if paused and rng.random() < 0.5:  # a single step: one or two lanes, from the same instant
            ends = [t + rng.randint(1, 10) * DT for _ in range(rng.randint(1, 2))]
            items += [StepMessage(event=SimpleNamespace(t_start=t, t_end=e)) for e in sorted(ends)]
            truth.append((truth.pop()[0], t))
            t = max(ends)
            truth.append((t, None))
            continue
        paused = not paused
        items.append(StatusEvent(event=PAUSED if paused else RESUMED, t=t))
        if paused:
            truth.append((t, None))
        else:
            truth.append((truth.pop()[0], t))
    return items, [(a, b) for a, b in truth if b is None or b > a]


def paused_before(truth, t: float, now: float) -> float:
    return sum(max(0.0, min(t, now if b is None else b) - a) for a, b in truth if a < t)


@pytest.mark.parametrize("seed", range(200))
def test_running_time_leaves_out_exactly_the_paused_time(seed):
    rng = random.Random(seed)
    items, truth = session(rng)
    p = Pauses()
    for item in items:
        p.on_event(item)
    now = max(x.t if isinstance(x, StatusEvent) else x.event.t_end for x in items) + 0.5
    for t in [rng.uniform(0, now) for _ in range(20)] + [now]:
        assert p.running_s(t, now) == pytest.approx(t - paused_before(truth, t, now), abs=1e-9)
    assert p.paused_s(now) == pytest.approx(paused_before(truth, float("inf"), now), abs=1e-9)
