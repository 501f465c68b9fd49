"""Scheduling policies without a model: who is admitted first, who is preempted, how long anyone waits."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import EngineConfig
from engine.request import check_priority_tenant
from engine.scheduler.policy import OUTPUT_WEIGHT, PROMPT_WEIGHT, SJF_MAX_WAIT_S
from scheduler_helpers import FakeClock, request, rows, run_fake, scheduler, step


def ids(reqs) -> list[int]:
    return [r.request_id for r in reqs]


def test_priority_admits_lower_values_first_then_by_arrival():
    s = scheduler(scheduling_policy="priority", max_num_seqs=2)
    for rid, prio in enumerate((5, 0, 3, 0)):
        s.add(request(rid, prompt_len=2, max_tokens=8, arrival_s=rid, priority=prio))
    out = step(s)
    assert out.admitted == [1, 3] and ids(s.waiting) == [2, 0]


def test_fcfs_ignores_priority():
    s = scheduler(max_num_seqs=2)
    for rid, prio in enumerate((5, 0, 3)):
        s.add(request(rid, prompt_len=2, arrival_s=rid, priority=prio))
    assert step(s).admitted == [0, 1]


def test_a_better_priority_preempts_the_worst_running_request_only():
    s = scheduler(scheduling_policy="priority", max_num_seqs=3)
    for rid, prio in enumerate((2, 7, 7)):
        s.add(request(rid, prompt_len=2, max_tokens=20, arrival_s=rid, priority=prio))
    step(s)
    s.add(request(3, prompt_len=2, max_tokens=20, arrival_s=3, priority=7))  # equal: waits
    out = step(s)
    assert out.preempted == [] and ids(s.waiting) == [3]
    s.add(request(4, prompt_len=2, max_tokens=20, arrival_s=4, priority=1))  # better than 7: preempts
    out = step(s)
    assert out.preempted == [2] and out.admitted == [4]  # the newest of the worst priority
    assert ids(s.waiting) == [2, 3] and sorted(ids(s.running)) == [0, 1, 4]  # 2 keeps its arrival rank
    # running now: priorities 1, 2 and 7; a priority-2 newcomer takes the 7's place, not the 2's
    s.add(request(5, prompt_len=2, max_tokens=20, arrival_s=5, priority=2))
    assert step(s).preempted == [1]


def test_priority_preempts_for_blocks_too():
    s = scheduler(scheduling_policy="priority", num_blocks=4, block_size=4, max_num_batched_tokens=64)
    s.add(request(0, prompt_len=12, max_tokens=20, priority=3))  # 3 of the 4 blocks
    step(s)
    s.add(request(1, prompt_len=8, max_tokens=2, arrival_s=1, priority=0))  # needs 2 blocks
    out = step(s)
    assert out.preempted == [0] and out.admitted == [1]


def test_sjf_runs_the_least_remaining_work_first():
    s = scheduler(scheduling_policy="sjf", max_num_seqs=1)
    s.add(request(0, prompt_len=10, max_tokens=10))
    s.add(request(1, prompt_len=2, max_tokens=3))
    s.add(request(2, prompt_len=5, max_tokens=1))
    finished = []
    while s.has_work():
        finished += step(s).admitted
    assert finished == [1, 2, 0]


def test_sjf_aging_bounds_the_wait_of_a_long_request_under_a_flood_of_short_ones():
    """A short request arrives every step and each would go before the long one: the long one is
    still admitted once it has waited SJF_MAX_WAIT_S, plus at most the step that frees a slot."""
    clock = FakeClock()
    s = scheduler(scheduling_policy="sjf", max_num_seqs=1, clock=clock)
    dt = 0.1
    s.add(request(0, prompt_len=8, max_tokens=8, arrival_s=0.0))
    admitted_at, overtaken = None, 0
    for rid in range(1, 200):
        s.add(request(rid, prompt_len=2, max_tokens=1, arrival_s=clock.t))
        out = step(s, now=clock.t)
        if 0 in out.admitted:
            admitted_at = clock.t
            break
        overtaken += len(out.admitted)
        clock.t += dt
    assert overtaken > 5, "shorter requests should have gone first"
    assert admitted_at is not None and SJF_MAX_WAIT_S <= admitted_at <= SJF_MAX_WAIT_S + dt


def test_fair_alternates_between_a_flooding_and_a_light_tenant():
    s = scheduler(scheduling_policy="fair", max_num_seqs=1)
    for rid in range(8):
        s.add(request(rid, prompt_len=4, max_tokens=2, arrival_s=rid, tenant="flood"))
    order = step(s).admitted
    s.add(request(100, prompt_len=4, max_tokens=2, arrival_s=10, tenant="light"))
    s.add(request(101, prompt_len=4, max_tokens=2, arrival_s=11, tenant="light"))
    while s.has_work():
        order += step(s).admitted
    assert order[:5] == [0, 100, 1, 101, 2]


def test_fair_weighs_prompt_and_output_tokens():
    s = scheduler(scheduling_policy="fair")
    a = request(0, prompt_len=5, max_tokens=3, tenant="a")
    s.add(a)
    s.add(request(1, prompt_len=1, max_tokens=20, tenant="b"))  # keeps the scheduler busy
    for _ in range(3):  # the prompt and the first token, then two decodes
        step(s)
    assert a.is_finished and s.policy.served["a"] == 5 * PROMPT_WEIGHT + 3 * OUTPUT_WEIGHT


def test_fair_tallies_start_over_when_the_scheduler_is_empty():
    s = scheduler(scheduling_policy="fair")
    s.add(request(0, prompt_len=5, max_tokens=3, tenant="a"))
    while s.has_work():
        step(s)
    assert not s.policy.served


def test_fair_idle_tenant_banks_no_credit():
    s = scheduler(scheduling_policy="fair", max_num_seqs=1)
    s.add(request(0, prompt_len=4, max_tokens=8, tenant="busy"))
    for _ in range(4):
        step(s)
    s.add(request(1, prompt_len=4, max_tokens=8, tenant="new"))
    assert s.policy.served["new"] == s.policy.served["busy"] > 0


@pytest.mark.parametrize("strategy", ["static", "dynamic"])
def test_static_batches_form_in_policy_order(strategy):
    s = scheduler(strategy, scheduling_policy="priority", static_batch_size=2)
    for rid, prio in enumerate((5, 0, 3)):
        s.add(request(rid, prompt_len=2, max_tokens=2, arrival_s=rid, priority=prio))
    out = step(s)
    assert [r[0] for r in rows(out)] == [1, 2] and ids(s.waiting) == [0]


def test_static_batches_form_in_sjf_and_fair_order():
    s = scheduler("static", scheduling_policy="sjf", static_batch_size=2)
    for rid, n in enumerate((9, 2, 5)):
        s.add(request(rid, prompt_len=n, max_tokens=2))
    assert step(s).admitted == [1, 2]
    s = scheduler("static", scheduling_policy="fair", static_batch_size=2)
    for rid, tenant in enumerate(("a", "a", "b")):
        s.add(request(rid, prompt_len=2, max_tokens=2, arrival_s=rid, tenant=tenant))
    assert step(s).admitted == [0, 2]


def test_scheduling_policy_is_validated():
    with pytest.raises(ValueError, match="EngineConfig.scheduling_policy must be one of fcfs, priority, sjf, fair, slo"):
        EngineConfig(model="m", scheduling_policy="lifo")


def test_slo_serves_first_the_requests_that_can_still_meet_their_ttft():
    """Earliest TTFT deadline first; one already past its deadline without a first token goes last (it
    cannot count in goodput any more)."""
    clock = FakeClock(2.0)
    s = scheduler(scheduling_policy="slo", slo_ttft_s=1.5, max_num_seqs=1, clock=clock)
    for rid, arrival in enumerate((0.0, 1.0, 1.2)):
        s.add(request(rid, prompt_len=2, max_tokens=2, arrival_s=arrival))
    assert step(s).admitted == [1] and ids(s.waiting) == [2, 0]
    fcfs = scheduler(scheduling_policy="slo", max_num_seqs=1, clock=clock)  # no TTFT SLO: arrival order
    for rid, arrival in enumerate((0.0, 1.0, 1.2)):
        fcfs.add(request(rid, prompt_len=2, max_tokens=2, arrival_s=arrival))
    assert step(fcfs).admitted == [0]


def test_slo_budget_keeps_a_step_within_the_tpot_slo():
    """Step time fitted as a + b x tokens over recent steps: the budget is what fits in 90% of the TPOT
    SLO, never fewer than the decoding rows, never more than the configured budget; with nothing
    decoding, the configured budget (else a machine too slow for the SLO would never start a prompt)."""
    from engine.scheduler.policy import SLO_MIN_SAMPLES, SLOPolicy
    from types import SimpleNamespace
    decoding = lambda n: [SimpleNamespace(num_tokens=9, num_computed_tokens=8)] * n  # noqa: E731
    p = SLOPolicy(slo_ttft_s=None, slo_tpot_s=0.05)
    assert p.step_budget(512, decoding(3)) == 512  # nothing measured yet
    for n in range(SLO_MIN_SAMPLES):
        p.on_step(8 + 16 * n, 0.01 + 0.001 * (8 + 16 * n))
    assert p.step_budget(512, decoding(3)) == 35  # (0.045 - 0.01) / 0.001
    assert p.step_budget(512, decoding(40)) == 40 and p.step_budget(20, decoding(3)) == 20
    assert SLOPolicy(None, None).step_budget(512, decoding(3)) == 512
    slow = SLOPolicy(slo_ttft_s=None, slo_tpot_s=0.05)  # a fixed cost beyond the SLO: nothing fits
    for n in range(SLO_MIN_SAMPLES):
        slow.on_step(8 + 16 * n, 0.2 + 0.001 * (8 + 16 * n))
    assert slow.step_budget(512, decoding(2)) == 2  # the decodes go on
    assert slow.step_budget(512, []) == 512  # nobody decodes: no token's time to keep, prompts still start


def test_slo_policy_schedules_within_its_budget():
    """Through the scheduler: once steps are timed, a step's tokens stay within the SLO's budget (the
    fake clock moves 1 ms per token computed)."""
    clock = FakeClock()
    s = scheduler(scheduling_policy="slo", slo_tpot_s=0.03, max_num_batched_tokens=256, num_blocks=256,
                  clock=clock)
    for rid in range(6):
        s.add(request(rid, prompt_len=60, max_tokens=20))
    sizes = []
    while s.has_work():
        out = s.schedule()
        assert out.num_tokens <= out.token_budget <= 256  # the budget the step event and the waits report
        clock.t += 0.005 + 0.001 * out.num_tokens
        run_fake(s, out, clock.t)
        sizes.append(out.num_tokens)
    assert sizes[0] == 256 and max(sizes[12:]) <= 22  # (0.027 - 0.005) / 0.001, once fitted


@pytest.mark.parametrize("field, bad", [("slo_ttft_s", 0), ("slo_ttft_s", True), ("slo_tpot_s", -1.0),
                                        ("slo_tpot_s", 1e9)])
def test_slos_are_validated(field, bad):
    with pytest.raises(ValueError, match=f"EngineConfig.{field} must be None or a number of seconds"):
        EngineConfig(model="m", **{field: bad})


@pytest.mark.parametrize("priority, tenant, match", [
    (1.5, None, "priority must be an integer"), (True, None, "priority"), (10**6, None, "priority"),
    (0, "", "tenant must be a string"), (0, "x" * 65, "tenant"), (0, 3, "tenant")])
def test_priority_and_tenant_are_validated(priority, tenant, match):
    with pytest.raises(ValueError, match=match):
        check_priority_tenant(priority, tenant)


@pytest.mark.parametrize("strategy", ["continuous", "static", "dynamic"])
@settings(max_examples=40, deadline=None)
@given(arrivals=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 8), st.integers(0, 3)), min_size=2,
                         max_size=40))
def test_sjf_no_later_arrival_is_admitted_before_an_aged_request(strategy, arrivals):
    """Random arrivals (prompt length, max_tokens, steps to the next one), 0.25 s per step: whenever a
    request is admitted, no request that arrived before it has been waiting SJF_MAX_WAIT_S or more."""
    clock = FakeClock()
    s = scheduler(strategy, scheduling_policy="sjf", max_num_seqs=3, max_num_batched_tokens=16, num_blocks=12,
                  static_batch_size=3, static_max_wait_s=0.5, clock=clock)
    pending = list(arrivals)
    first_admitted: dict[int, float] = {}
    reqs = []
    while pending or s.has_work():
        if pending:
            n, m, gap = pending.pop(0)
            reqs.append(request(len(reqs), prompt_len=n, max_tokens=m, arrival_s=clock.t))
            s.add(reqs[-1])
            s.draining = not pending
        for _ in range(gap if pending else 1):
            for rid in step(s, now=clock.t).admitted:
                if rid in first_admitted:
                    continue
                first_admitted[rid] = clock.t
                aged = [r.request_id for r in reqs[:rid] if r.request_id not in first_admitted
                        and clock.t - r.arrival_s >= SJF_MAX_WAIT_S]
                assert not aged, f"{rid} admitted while {aged} had waited past the bound"
            clock.t += 0.25
    assert len(first_admitted) == len(reqs)


def _light_tenant_waits(policy: str) -> list[int]:
    """A flooding tenant adds 3 requests every step, a light one 1 every 5 steps: the light
    requests' waits (in steps) from arrival to admission."""
    s = scheduler(scheduling_policy=policy, max_num_seqs=2)
    arrived, waits = {}, []
    for t in range(60):
        for k in range(3):
            s.add(request(1000 * t + k, prompt_len=4, max_tokens=4, arrival_s=t, tenant="flood"))
        if t % 5 == 0:
            s.add(request(1000 * t + 999, prompt_len=4, max_tokens=4, arrival_s=t, tenant="light"))
            arrived[1000 * t + 999] = t
        for rid in step(s).admitted:
            if rid in arrived:
                waits.append(t - arrived.pop(rid))
    return waits + [60 - t for t in arrived.values()]  # still waiting at the end


def test_a_flooding_tenant_cannot_starve_a_light_one():
    fair, fcfs = _light_tenant_waits("fair"), _light_tenant_waits("fcfs")
    assert len(fair) == 12 and max(fair) <= 4  # at most one flood request's run ahead of it
    assert max(fcfs) > 20  # the control: without fairness the light tenant's wait keeps growing


@settings(max_examples=60, deadline=None)
@given(arrivals=st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 10), st.integers(1, 6)), min_size=1,
                         max_size=30))
def test_priority_preempts_only_a_worst_running_request_for_a_strictly_better_one(arrivals):
    """Slots run short (blocks never do): every preemption admits a strictly better priority in the
    same step, and its victim had the worst priority running."""
    s = scheduler(scheduling_policy="priority", max_num_seqs=3, num_blocks=1000)
    reqs = [request(rid, prompt_len=n, max_tokens=m, arrival_s=rid, priority=prio)
            for rid, (prio, n, m) in enumerate(arrivals)]
    for req in reqs:
        s.add(req)
        worst_running = max((r.priority for r in s.running), default=None)
        out = step(s)
        best_admitted = min((reqs[rid].priority for rid in out.admitted), default=None)
        for victim in (reqs[rid] for rid in out.preempted):
            assert victim.priority == worst_running and best_admitted < victim.priority
