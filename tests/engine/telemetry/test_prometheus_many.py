"""observe_many leaves a histogram as that many observe() calls would: the same buckets and count, the
same sum (to rounding), for any amount and count (it reads prometheus_client's own fields)."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st
from prometheus_client import CollectorRegistry, Histogram

from engine.telemetry.prometheus import ITL_BUCKETS, observe_many
from tiers import examples


def samples(histogram) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in histogram.collect() for s in metric.samples if not s.name.endswith("_created")}


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.floats(-1.0, 20.0, allow_nan=False) | st.sampled_from(ITL_BUCKETS),
                          st.integers(1, 300)), max_size=8))
def test_many_at_once_equal_one_at_a_time(observations):
    one, many = (Histogram("h", "h", buckets=ITL_BUCKETS, registry=CollectorRegistry()) for _ in range(2))
    for amount, n in observations:
        for _ in range(n):
            one.observe(amount)
        observe_many(many, amount, n)
    a, b = samples(one), samples(many)
    assert a.keys() == b.keys()
    for key, value in a.items():
        assert math.isclose(value, b[key], rel_tol=1e-9, abs_tol=1e-9), key
