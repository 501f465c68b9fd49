"""Service per tenant, and how fairly it was shared while every tenant wanted more.

- A tenant is *backlogged* at time t when one of its requests is waiting: it has arrived and
  not yet been admitted (arrival_s <= t < scheduled_s, its first admission; never admitted:
  until the run's last finish). A running request is not backlog: it gets one token per step
  whatever the policy, so only admission can be fair or unfair. The *window* is the set of
  times at which every tenant of the workload is backlogged (a union of intervals).
- A tenant's tokens served: the tokens steps computed for its requests (their prefill and
  decode entries, padding excluded): prompt tokens (recomputation included) and one per decode,
  counted at the end of the step. The fair policy's weights are not applied: both count 1.
- A tenant's rate: its tokens served in steps that end inside the window (a < t_end <= b for
  one of its intervals) / the window's length.
- Jain's fairness index over n tenants' rates x_i: (sum x_i)^2 / (n * sum x_i^2). It is 1 when
  every tenant is served at the same rate and 1/n when one tenant gets everything.
  Only the window counts: once a tenant has nothing left to ask for, others may take its share.
"""
from __future__ import annotations

from .records import RequestRecord, StepSample

Interval = tuple[float, float]


def jain_index(xs: list[float]) -> float | None:
    """Jain's index of xs; None when there are none or all are 0."""
    total, squares = sum(xs), sum(x * x for x in xs)
    return total * total / (len(xs) * squares) if squares > 0 else None


def merge(intervals: list[Interval]) -> list[Interval]:
    """The union of half-open intervals, sorted and disjoint."""
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """The intersection of two sorted disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < b:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def backlogged_window(records: list[RequestRecord], tenant_of: dict[int, str]) -> list[Interval]:
    """When every tenant has a request waiting for admission."""
    end = max((r.finish_s for r in records if r.finish_s is not None), default=0.0)
    busy: dict[str, list[Interval]] = {}
    for r in records:
        busy.setdefault(tenant_of[r.index], []).append((r.arrival_s, end if r.scheduled_s is None else r.scheduled_s))
    window: list[Interval] | None = None
    for intervals in busy.values():
        window = merge(intervals) if window is None else intersect(window, merge(intervals))
    return window or []


def inside(t: float, window: list[Interval]) -> bool:
    return any(a < t <= b for a, b in window)


def tenant_service(records: list[RequestRecord], steps: list[StepSample], tenant_of: dict[int, str]) -> dict:
    """{"tenants": {name: {requests, tokens_served, backlogged_rate}}, "backlogged_s", "jain_index"}. Over the
    requests `records` holds: tokens a step served another (in a live window, a request still running) are
    not counted."""
    window = backlogged_window(records, tenant_of)
    length = sum(b - a for a, b in window)
    names = list(dict.fromkeys(tenant_of[r.index] for r in records))
    total = dict.fromkeys(names, 0)
    in_window = dict.fromkeys(names, 0)
    counted = {r.index for r in records}
    for s in steps:
        hit = inside(s.t_end, window)
        for index, n in (s.served or {}).items():
            if index not in counted:
                continue
            total[tenant_of[index]] += n
            if hit:
                in_window[tenant_of[index]] += n
    rates = {t: in_window[t] / length if length > 0 else None for t in names}
    tenants = {t: {"requests": sum(1 for r in records if tenant_of[r.index] == t), "tokens_served": total[t],
                   "backlogged_rate": rates[t]} for t in names}
    jain = jain_index(list(rates.values())) if length > 0 and len(names) > 1 else None
    return {"tenants": tenants, "backlogged_s": length, "jain_index": jain}
