"""The narration is never wrong: every sentence the narrator says over the shipped recording, live runs of
the shipped scenarios and random workloads is checked true against the events (tests/narration_checker.py),
also for a narrator started mid-stream ("Clear views"). Nor is a scenario's "What to watch": its claims
(engine/workshop/scenarios/claims.py) hold on the same runs, in the machine's default dtype."""
from __future__ import annotations

import dataclasses
import heapq
import random
import time

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.events import FinishedEvent, LanesEvent, RequestEvent, StepMessage
from engine.workshop.narration import Narrator
from engine.workshop.recording import load
from engine.workshop.recording.stage import SHIPPED
from engine.telemetry.live_metrics import LiveMetrics
from engine.workshop.scenarios import claims, runner
from engine.workshop.scenarios.catalog import shipped
from narration_checker import check, kind, typed
from service_helpers import make_service, wait_idle, wait_settled

MAX_LEN = 512  # the tiny models' context
# Scenarios whose claim is a difference of tens of the tiny model's steps (a millisecond or two each) run with
# each iteration lasting at least this long (slow motion): a lane's first step after it idled has taken 100 ms
# here beside another lane, which hid 07's 64 steps of head-of-line blocking. The default model's steps on a
# CPU are 40-50 ms, a GPU's a few.
PACED_S = {"07-head-of-line": 0.005}
STARTS = 6     # mid-stream starts ("Clear views") tried per stream


def narrate(items: list, now: float, start: int = 0) -> list:
    n = Narrator(min_gap_s=0.0, keep=10**6, cursor=start)  # as if it read a hub from there
    for item in items[start:]:
        n.on_event(item)
    return n.recent(10**6, now=now)[::-1]


def assert_true(items: list[dict], now: float, starts: int = STARTS) -> list:
    """Narrate items from the beginning and from a few points mid-stream: every sentence is true."""
    said = narrate(items, now)
    assert said and check(items, said) == []
    for start in range(len(items) // starts, len(items), max(1, len(items) // starts)):
        assert check(items, narrate(items, now, start), start) == [], start
    return said


def has(said, lane, words: str) -> bool:
    return any(words in s.text for s in said if s.lane == lane)


def settle(items: list[dict], quiet_s: float = 0.1) -> None:
    """Until the last events (a lane's final `finished`, published just after it went idle) are in."""
    n = -1
    while n != len(items):
        n = len(items)
        time.sleep(quiet_s)


# ---- the shipped recording ---------------------------------------------------------------------------
def test_the_shipped_recording_is_narrated_truly():
    rec = load(SHIPPED)
    items = typed([event for _, event in rec.events])
    said = assert_true(items, rec.end + 10)
    assert has(said, "static", "rows are padding") and has(said, "continuous", "joined the running batch")
    assert has(said, None, "static needed") and has(said, "continuous", "finished all 16 requests")


# ---- live runs of the shipped scenarios ------------------------------------------------------------
@pytest.fixture(scope="module")
def scenario_runs(tiny_model_dirs) -> dict[str, tuple[list[dict], list]]:
    """Each shipped scenario, run (4x faster arrivals) on a tiny model in the machine's default dtype:
    key -> (its hub items, sentences)."""
    # the app's token budget (make_service's is smaller): admissions are not spread over extra steps, so a
    # request sent "while the first four run" (09's urgent one) finds them running
    svc = make_service(tiny_model_dirs["llama"], strategies=("continuous",), max_model_len=256, dtype="auto",
                       max_num_batched_tokens=EngineConfig().max_num_batched_tokens)
    items: list[dict] = []
    svc.hub.add_listener(items.append)  # every event, however many (the hub's ring keeps the latest)
    runs = {}
    try:
        for scenario in shipped():
            svc.set_slow_motion(PACED_S.get(scenario.key, 0.0))  # (its status event before the run's items)
            start = len(items)
            run_scenario(svc, scenario)
            settle(items)
            runs[scenario.key] = (items[start:], assert_true(items[start:], svc.clock() + 10))
            svc.set_slow_motion(0.0)
    finally:
        svc.stop()
    return runs


def run_scenario(svc, scenario, speedup: float = 4.0) -> None:
    svc.set_lanes({name: {**lane, "max_model_len": min(lane.get("max_model_len", MAX_LEN), MAX_LEN)}
                   for name, lane in scenario.lanes.items()})
    wait_settled(svc)
    t0, sent = time.monotonic(), []
    for i, a in enumerate(scenario.fitted(runner.fit_of(svc))):  # sent on time, confirmed after, as the app does
        time.sleep(max(0.0, t0 + a.at_s / speedup - time.monotonic()))
        deadline = time.monotonic() + runner.FULL_WAIT_S
        while a.when_batch_full and not runner.batches_full(svc.status()["engines"]) and time.monotonic() < deadline:
            time.sleep(runner.FULL_POLL_S)  # as the app's stream waits (StreamRunner._until_batches_full)
        prompt, messages = (None, a.chat()) if a.messages else (a.prompt(i), None)
        sent.append(svc.send(prompt, SamplingParams(max_tokens=a.max_tokens, temperature=0.0, ignore_eos=True),
                             messages=messages, priority=a.priority, tenant=a.tenant))
    for handles in sent:
        svc.confirm(handles)
    wait_idle(svc, 120)


def test_every_scenario_is_narrated_truly_from_any_starting_point(scenario_runs):
    assert set(scenario_runs) == {s.key for s in shipped()}
    for key, (items, said) in scenario_runs.items():
        lanes = {item.lane for item in items if isinstance(item, RequestEvent)}
        assert all(has(said, lane, "finished all") for lane in lanes), key


def test_the_scenarios_show_what_they_are_made_for(scenario_runs):
    """What shows whatever the machine's speed (who jumps a queue depends on timing: the random workloads
    below cover it)."""
    said = {key: s for key, (_, s) in scenario_runs.items()}
    shown = [("01-straggler", "continuous", "freed in the previous iteration"),
             ("01-straggler", "static", "rows are padding"),
             ("02-burst", "max batch 4", "freed in the previous iteration"),
             ("04-memory-pressure", "pool 64 blocks", "the KV pool ran out of blocks"),
             ("04-memory-pressure", "pool 64 blocks", "is back after its preemption"),
             ("06-shared-system-prompt", "cache on", "from the prefix cache"),
             ("13-memory-pressure-swap", "swap", "copied to the host pool"),
             ("13-memory-pressure-swap", "swap", "came back from the host pool, nothing recomputed"),
             ("13-memory-pressure-swap", "recompute", "it recomputes the"),
             ("15-disaggregated-prefill", "disaggregated", "moved from the prefill engine to the decode engine")]
    assert [x for x in shown if not has(said[x[0]], x[1], x[2])] == []
    assert not has(said["04-memory-pressure"], "pool 512 blocks", "preempted")


def test_what_each_scenario_says_to_watch_holds_on_its_run(scenario_runs):
    """Every claim of every scenario's "What to watch" (its [[claims]]), judged on the run's own events and
    the live metrics the cards show; a scenario that states nothing checkable would ship unchecked."""
    failed, judged = [], 0
    for scenario in shipped():
        items, _ = scenario_runs[scenario.key]
        metrics = LiveMetrics()
        for item in items:
            metrics.on_event(item)
        slos = {name: (lane.get("slo_ttft_s"), lane.get("slo_tpot_s")) for name, lane in scenario.lanes.items()}
        assert scenario.claims, scenario.key
        verdicts = claims.check(scenario.claims, metrics.summary(slos), items, default_model=False)
        failed += [f"{scenario.key}: {v.line()}" for v in verdicts if v.holds is False]
        judged += sum(v.holds is not None for v in verdicts)
    assert failed == [], "\n".join(failed)
    assert judged == sum(len(s.claims) for s in shipped()) - 1  # all but speculation's gain, on the default model


def test_a_narrator_made_by_clear_views_mid_stream(tiny_model_dirs):
    """A fresh narrator reading the hub from its head while a burst runs: it never names what it did not see
    arrive, and says nothing of the run it joined halfway."""
    svc = make_service(tiny_model_dirs["llama"], strategies=("continuous",), max_model_len=256, max_num_seqs=2)
    svc.set_slow_motion(0.02)  # the burst is still running when the views are cleared
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    try:
        for i in range(6):
            svc.submit(list(range(20, 30 + i)), params)
        while sum(isinstance(item, StepMessage) for _, item in svc.hub.read(0).events) < 8:
            time.sleep(0.01)
        settings = {name: dataclasses.asdict(cfg) for name, cfg in svc.lanes.items()}  # the UI's to give
        start = svc.hub.head
        fresh = Narrator(min_gap_s=0.0, keep=10**6, lanes=settings, cursor=start)
        fresh.recent(now=svc.clock())  # the UI reads it every second
        for i in range(3):
            svc.submit(list(range(40, 50 + i)), params)
        wait_idle(svc, 60)
        time.sleep(0.1)
        fresh.consume(svc.hub)
        said = fresh.recent(10**6, now=svc.clock() + 10)[::-1]
        batch = svc.hub.read(0)
    finally:
        svc.stop()
    assert batch.skipped == 0
    told = LanesEvent(lanes=settings)  # what the narrator was given, as if the hub held it first
    assert check([told, *(item for _, item in batch.events)], said, start + 1) == []
    kinds = {kind(s) for s in said}
    assert "joined" in kinds and kinds <= {"joined", "slot_reuse"}  # no total of the run it joined halfway


# ---- random workloads ----------------------------------------------------------------------------------
class TickClock:
    """Every reading is 1 ms later: engine times are deterministic."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def random_config(rng: random.Random, model_dir) -> EngineConfig:
    return EngineConfig(model=str(model_dir), device="cpu", dtype="float32", block_size=4, max_model_len=32,
                        num_kv_blocks=rng.choice([8, 12, 64]), strategy=rng.choice(["continuous", "static", "dynamic"]),
                        scheduling_policy=rng.choice(["fcfs", "sjf", "fair", "priority", "slo"]),
                        slo_ttft_s=rng.choice([None, 0.01, 0.05]), slo_tpot_s=rng.choice([None, 0.002, 0.01]),
                        max_num_seqs=rng.randint(1, 4), max_num_batched_tokens=rng.choice([32, 64]),
                        enable_chunked_prefill=rng.random() < 0.7, enable_prefix_caching=rng.random() < 0.5,
                        static_batch_size=rng.randint(2, 4), static_max_wait_s=0.02,
                        preemption_mode=rng.choice(["recompute", "swap"]), swap_space_gb=rng.choice([2, 8]) * BLOCK)


BLOCK = 2048 / 2 ** 30  # one KV block of the tiny llama (block_size 4, fp32), in GiB: host pools of 2 or 8


@dataclasses.dataclass(frozen=True)
class Arrival:
    iteration: int  # the lane's iteration it arrives before
    prompt: list[int]
    params: SamplingParams
    tenant: str
    priority: int


def random_stream(rng: random.Random, n: int) -> list[Arrival]:
    """n requests; half of them share an 8-token prefix (two KV blocks: prefix cache hits)."""
    shared = [rng.randrange(20, 200) for _ in range(8)]
    return sorted((Arrival(rng.randrange(0, 60), shared[:rng.choice([0, 8])] + [rng.randrange(20, 200) for _ in
                                                                              range(rng.randint(1, 12))],
                           SamplingParams(max_tokens=rng.randint(1, 12), temperature=0.0, ignore_eos=True),
                           rng.choice(["a", "b"]), rng.choice([-1, 0, 1])) for _ in range(n)),
                  key=lambda a: a.iteration)


class Lane:
    """One engine fed a request stream, with aborts at random iterations, publishing what a worker publishes
    (request, step and finished events)."""

    def __init__(self, name: str, eng: LLMEngine, rng: random.Random):
        self.name, self.eng, self.rng = name, eng, rng
        self.items: list[dict] = []
        self.popped: set[int] = set()

    def publish(self, event) -> None:
        event.lane, event.strategy = self.name, self.eng.cfg.strategy
        self.items.append(event)

    def add(self, rid: int, a: Arrival) -> None:
        t = self.eng.clock() - self.rng.random() * 0.01  # submitted a little before its lane took it
        self.eng.add_request(a.prompt, a.params, arrival_s=t, request_id=rid, priority=a.priority, tenant=a.tenant)
        self.publish(RequestEvent(request_id=rid, tag="fuzz", prompt=None, messages=None, priority=a.priority,
                                  num_prompt_tokens=len(a.prompt), max_tokens=a.params.max_tokens, arrival_s=t,
                                  tenant=a.tenant))

    def end(self, rids) -> None:
        for rid in rids:
            if rid not in self.popped:
                self.popped.add(rid)
                self.publish(FinishedEvent.of(self.eng.pop_output(rid)))

    def step(self) -> None:
        if self.rng.random() < 0.03 and self.eng.requests:  # a client gives up
            rid = self.rng.choice(sorted(self.eng.requests))
            self.eng.abort(rid)
            self.end([rid])
        ev = self.eng.step()
        if ev.entries or ev.finished:
            self.publish(StepMessage(event=ev))
            self.end(ev.finished)

    def run(self, stream: list[Arrival]) -> list[dict]:
        for k in range(100_000):
            for rid, a in enumerate(stream):
                if a.iteration == k:
                    self.add(rid, a)
            self.eng.draining = k >= stream[-1].iteration  # a partial static batch launches once nothing more comes
            if self.eng.draining and not self.eng.has_unfinished():
                return self.items
            self.step()
        raise AssertionError("the stream did not finish")


def merged(lanes: list[Lane]) -> list[dict]:
    """The lanes' items as one hub would hold them: in time order, each lane's in its own order."""
    def timed(items):
        t = 0.0
        for item in items:
            t = max(t, item.event.t_end if isinstance(item, StepMessage) else getattr(item, "finish_s", None) or item.arrival_s)
            yield t, item
    configs = {lane.name: dataclasses.asdict(lane.eng.cfg) for lane in lanes}
    return [LanesEvent(lanes=configs),
            *(item for _, item in heapq.merge(*(timed(lane.items) for lane in lanes), key=lambda ti: ti[0]))]


@pytest.fixture(scope="module")
def fuzz_engine(tiny_model_dirs) -> LLMEngine:
    return LLMEngine(EngineConfig(model=str(tiny_model_dirs["llama"]), device="cpu", dtype="float32",
                                  block_size=4, max_model_len=64, num_kv_blocks=64))


def test_random_workloads_are_narrated_truly(fuzz_engine, tiny_model_dirs):
    """Two lanes of random settings serve one random stream (the same requests)."""
    said_kinds: set[str | None] = set()
    for seed in range(32):
        rng = random.Random(seed)
        stream = random_stream(rng, rng.randint(3, 14))
        lanes = [Lane(name, LLMEngine(random_config(rng, tiny_model_dirs["llama"]), clock=TickClock(),
                                      share_weights_with=fuzz_engine), rng) for name in ("x", "y")]
        for lane in lanes:
            lane.run(stream)
        items = merged(lanes)
        said = assert_true(items, max(lane.eng.clock() for lane in lanes) + 10, starts=4)
        said_kinds |= {kind(s) for s in said}
    assert said_kinds >= {"slot_reuse", "joined", "preempted", "recompute", "swapped_in", "padding", "jump", "prefix_hit",
                          "finished", "compared"}, said_kinds
