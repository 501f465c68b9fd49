"""Scheduling policies: in which order requests are served, and who gives way.

A policy orders the waiting queue (who is admitted or joins a static batch first) and the running
set (who runs first when the token budget is short; the last one is the preemption victim when KV
blocks run out). Only `priority` lets a waiting request preempt a running one.

- fcfs: arrival order, as before policies existed (a preempted request goes back to the front).
- priority: lower `priority` first (as in vLLM), then arrival. A waiting request that cannot start
  preempts the running request of the worst priority, but only one of strictly worse priority.
- sjf: least predicted remaining work first (prompt tokens still to compute + output tokens still
  allowed). Aging bounds starvation: a request that has waited SJF_MAX_WAIT_S since it arrived
  goes ahead of every request that has not, in arrival order: no later arrival is admitted before it.
- slo: for latency SLOs (EngineConfig.slo_ttft_s, slo_tpot_s). Earliest TTFT deadline first (arrival +
  slo_ttft_s), except that a request still without its first token past its deadline goes last: it
  cannot count in goodput any more, and serving it first would make the others late too. And a token
  budget per step that keeps a step, so every running decode's time per token, within slo_tpot_s: step
  time is fitted as a + b x tokens over the last SLO_FIT_STEPS steps, and the budget is the tokens that
  fit in SLO_TPOT_SHARE of the SLO (never fewer than the decoding rows, never more than
  max_num_batched_tokens). Until the fit has SLO_MIN_SAMPLES steps, the configured budget.
- fair: the tenant with the fewest weighted tokens served first (PROMPT_WEIGHT per prompt token
  computed, recomputation included; OUTPUT_WEIGHT per token generated), one request per tenant per
  round, so a flooding tenant's backlog queues behind another tenant's next request. A tenant with
  nothing queued starts level with the least-served busy tenant (idling banks no credit); the
  tallies start over whenever the scheduler is empty.
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque

import numpy as np

from ..request import Request

SJF_MAX_WAIT_S = 2.0
PROMPT_WEIGHT = 1
OUTPUT_WEIGHT = 2  # a decode step costs a whole iteration's slot for one token
SLO_FIT_STEPS = 64
SLO_MIN_SAMPLES = 8
SLO_TPOT_SHARE = 0.9  # headroom: a step's time varies around the fit


class Policy:
    """fcfs: keeps every queue as it is."""

    def order(self, requests: list[Request], now: float) -> list[Request]:
        """The requests, most deserving first (a stable order)."""
        return list(requests)

    def outranks(self, waiting: Request, running: Request) -> bool:
        """May `waiting` preempt `running` to start?"""
        return False

    def why_first(self, head: Request, now: float) -> str | None:
        """Why `head` leads the ordered queue, where the policy's usual order is not the reason (None)."""
        return None

    def on_add(self, request: Request) -> None:
        """A request entered the scheduler."""

    def on_served(self, request: Request, prompt_tokens: int, output_tokens: int) -> None:
        """An iteration computed prompt_tokens of its prompt (or recomputation) and generated output_tokens."""

    def on_finish(self, request: Request) -> None:
        """A request left the scheduler."""

    def step_budget(self, budget: int, running: list[Request]) -> int:
        """The token budget of the next step: the configured one, `budget`, or fewer (slo), given the
        running requests."""
        return budget

    def on_step(self, num_tokens: int, seconds: float) -> None:
        """A step computed num_tokens in `seconds` (schedule to update)."""


class PriorityPolicy(Policy):
    def order(self, requests, now):
        return sorted(requests, key=lambda r: (r.priority, r.arrival_s, r.request_id))

    def outranks(self, waiting, running):
        return waiting.priority < running.priority


class SJFPolicy(Policy):
    def order(self, requests, now):
        return sorted(requests, key=lambda r: self._rank(r, now))

    def why_first(self, head, now):
        if now - head.arrival_s >= SJF_MAX_WAIT_S:
            return f"age: #{head.request_id} waited over {SJF_MAX_WAIT_S:g} s, SJF's bound on starvation"
        return None

    @staticmethod
    def _rank(r: Request, now: float) -> tuple:
        if now - r.arrival_s >= SJF_MAX_WAIT_S:  # aged: ahead of everyone younger, oldest first
            return 0, r.arrival_s, r.request_id
        remaining = r.num_tokens - r.num_computed_tokens + r.params.max_tokens - len(r.output_token_ids)
        return 1, remaining, r.arrival_s, r.request_id


class FairPolicy(Policy):
    def __init__(self):
        self.served: defaultdict[str | None, float] = defaultdict(float)  # tenant -> weighted tokens
        self.active: Counter[str | None] = Counter()  # tenant -> its requests in the scheduler

    def order(self, requests, now):
        rounds: Counter[str | None] = Counter()
        keyed = []
        for r in sorted(requests, key=lambda r: (r.arrival_s, r.request_id)):
            keyed.append(((rounds[r.tenant], self.served[r.tenant], r.arrival_s, r.request_id), r))
            rounds[r.tenant] += 1
        return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]

    def on_add(self, request):
        t = request.tenant
        if not self.active[t]:  # an idle tenant banks no credit: it starts level with the least served
            busy = [self.served[u] for u, n in self.active.items() if n]
            if busy:
                self.served[t] = max(self.served[t], min(busy))
        self.active[t] += 1

    def on_served(self, request, prompt_tokens, output_tokens):
        self.served[request.tenant] += PROMPT_WEIGHT * prompt_tokens + OUTPUT_WEIGHT * output_tokens

    def on_finish(self, request):
        self.active[request.tenant] -= 1
        if not any(self.active.values()):  # idle: start over, so the tallies never outgrow the tenants in use
            self.served.clear()
            self.active.clear()


class SLOPolicy(Policy):
    def __init__(self, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None):
        self.ttft, self.tpot = slo_ttft_s, slo_tpot_s
        self.steps: deque[tuple[int, float]] = deque(maxlen=SLO_FIT_STEPS)  # (tokens, seconds)

    def order(self, requests, now):
        return sorted(requests, key=lambda r: self._rank(r, now))

    def _rank(self, r: Request, now: float) -> tuple:
        deadline = r.arrival_s + (self.ttft or 0.0)
        late = self.ttft is not None and r.first_token_s is None and now > deadline
        return late, deadline, r.request_id

    def step_budget(self, budget, running):
        fit = None if self.tpot is None else self._fit()
        if fit is None:
            return budget
        a, b = fit
        decoding = sum(r.num_tokens - r.num_computed_tokens == 1 for r in running)
        if not decoding:  # no token's time to keep: the whole budget (a step that fits none would stall)
            return budget
        return max(decoding, min(budget, int((SLO_TPOT_SHARE * self.tpot - a) / b + 1e-9)))

    def _fit(self) -> tuple[float, float] | None:
        """(a, b) of seconds = a + b x tokens over the recent steps; None until it can be told."""
        if len(self.steps) < SLO_MIN_SAMPLES:
            return None
        x, y = np.array(self.steps, dtype=float).T
        if np.ptp(x) == 0:
            return None
        b, a = np.polyfit(x, y, 1)
        return (a, b) if b > 0 else None

    def on_step(self, num_tokens, seconds):
        if num_tokens:
            self.steps.append((num_tokens, seconds))


def make_policy(cfg) -> Policy:
    """The policy EngineConfig.scheduling_policy names."""
    if cfg.scheduling_policy == "slo":
        return SLOPolicy(cfg.slo_ttft_s, cfg.slo_tpot_s)
    return {"fcfs": Policy, "priority": PriorityPolicy, "sjf": SJFPolicy, "fair": FairPolicy}[cfg.scheduling_policy]()
