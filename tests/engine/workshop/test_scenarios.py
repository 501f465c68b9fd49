"""Scenario files: every shipped one loads, its lanes differ, its stream fits the default model's context
(and a tiny one's); the loader's errors name the file and the field."""
from __future__ import annotations

import dataclasses

import pytest

from engine import EngineConfig
from engine.serving.lanes import describe_difference
from engine.workshop.scenarios import Fit, ScenarioError, load_scenario, load_scenarios
from engine.workshop.scenarios.catalog import by_number, running_scenario, shipped
from engine.workshop.scenarios.headline import METRICS, run_headline
from engine.workshop.scenarios.model import TEMPLATE_TOKENS

BASE = EngineConfig(model="m", device="cpu")
DEFAULT_CONTEXT = 8192  # SmolLM2-135M-Instruct
REQUIRED = ("straggler", "burst", "poisson", "memory-pressure", "long-prompt", "shared-system-prompt",
            "head-of-line", "flooding-tenant")


def by_key(part: str):
    return next(s for s in shipped() if part in s.key)


def test_the_workshop_scenarios_ship_and_load_in_file_order():
    keys = [s.key for s in shipped()]
    assert keys == sorted(keys) and all(any(r in k for k in keys) for r in REQUIRED)
    assert len({s.title for s in shipped()}) == len(keys)
    assert by_number(1) is shipped()[0]
    with pytest.raises(ValueError, match="from 1 to"):
        by_number(len(keys) + 1)


@pytest.mark.parametrize("scenario", shipped(), ids=lambda s: s.key)
def test_lanes_differ_and_the_stream_fits(scenario):
    a, b = scenario.lane_configs(BASE).values()
    assert describe_difference(a, b) and describe_difference(b, a)
    if a.strategy != b.strategy:  # strategies compared at the same maximum batch, said once: the strategy
        assert _max_batch(a) == _max_batch(b) and describe_difference(a, b) == [a.strategy]
    assert scenario.watch and scenario.explain
    contexts = [c.max_model_len or DEFAULT_CONTEXT for c in (a, b)]
    assert scenario.fitted(Fit(min(contexts))) == list(scenario.arrivals)  # the default model: as written
    assert all(x.messages and x.prompt_tokens for x in scenario.arrivals)  # text the model answers in language
    for fit in (Fit(min(contexts)), Fit(128)):
        arrivals = scenario.fitted(fit)
        assert all(_longest(x) + x.max_tokens <= fit.max_model_len for x in arrivals)
        for cfg in (a, b):  # no request waits forever for a full static batch or is refused unchunked
            if cfg.strategy == "static":
                assert len(arrivals) % cfg.static_batch_size == 0
            if not cfg.enable_chunked_prefill:
                assert all(_longest(x) + x.max_tokens <= cfg.max_num_batched_tokens for x in arrivals)
            if cfg.num_kv_blocks:  # one request fits the pool
                assert all(_longest(x) + x.max_tokens <= cfg.num_kv_blocks * cfg.block_size for x in arrivals)


def _max_batch(cfg) -> int:
    return cfg.max_num_seqs if cfg.strategy == "continuous" else cfg.static_batch_size


def test_the_default_lanes_compare_at_the_same_maximum_batch():
    assert _max_batch(BASE) == _max_batch(dataclasses.replace(BASE, strategy="static"))


def _longest(x) -> int:
    """An arrival's prompt tokens at most: its stated range's top, or on a fitted model what it was cut to
    (a character a token at worst), template included."""
    if not x.messages:
        return x.prompt_len
    cut = sum(len(text) for _, text in x.messages) + TEMPLATE_TOKENS
    return min(x.prompt_tokens[1], cut) if x.prompt_tokens else cut


def test_running_scenario_recognises_its_lanes():
    s = by_key("block-size")
    assert running_scenario(s.lane_configs(BASE), BASE) is s and s.runs_on(s.lane_configs(BASE), BASE)
    assert running_scenario({"continuous": BASE}, BASE) is None


def test_straggler_has_one_long_answer_per_static_batch():
    arrivals = by_key("straggler").arrivals
    for batch in (arrivals[:8], arrivals[8:]):
        outputs = sorted(x.max_tokens for x in batch)
        assert outputs[-1] >= 4 * outputs[-2]


def test_poisson_arrivals_are_seeded_and_spread():
    a = by_key("poisson")
    b = load_scenario(next(p for p in _shipped_files() if "poisson" in p.name))
    assert a.arrivals == b.arrivals
    gaps = {round(y.at_s - x.at_s, 3) for x, y in zip(a.arrivals, a.arrivals[1:])}
    assert len(gaps) > 5  # exponential gaps, not a fixed period


def test_memory_pressure_pool_is_too_small_for_the_stream_at_once():
    s = by_key("memory-pressure")
    small, large = s.lane_configs(BASE).values()
    need = sum(-(-(x.prompt_tokens[0] + x.max_tokens) // small.block_size) for x in s.arrivals)
    most = sum(-(-(x.prompt_tokens[1] + x.max_tokens) // small.block_size) for x in s.arrivals)
    assert small.num_kv_blocks < need / 2 and large.num_kv_blocks >= most
    assert describe_difference(small, large) and small.max_model_len == large.max_model_len


def test_long_prompt_arrives_while_short_ones_decode():
    arrivals = by_key("long-prompt").arrivals
    long = [x for x in arrivals if x.prompt_tokens[0] >= 1000]
    assert len(long) == 1 and sum(1 for x in arrivals if x.at_s < long[0].at_s) == 8


@pytest.mark.parametrize("part,policy", [("head-of-line", "sjf"), ("flooding-tenant", "fair"),
                                         ("urgent", "priority")])
def test_policy_scenarios_differ_only_by_policy_with_a_batch_small_enough_to_queue(part, policy):
    s = by_key(part)
    fcfs, other = s.lane_configs(BASE).values()
    assert describe_difference(other, fcfs) == [f"{policy} policy"]
    assert len(s.arrivals) > 2 * other.max_num_seqs
    assert s.presenter_only == (policy != "sjf")  # tenants and priorities are the presenter's


class _FillingService:
    """What a scenario's stream reads of a service: two lanes whose batches fill on the fourth status read."""

    def __init__(self):
        self.reads, self.running, self.sent, self.workers = 0, 0, [], {}

    def status(self) -> dict:
        self.reads += 1
        self.running = 4 if self.reads >= 4 else self.reads - 1
        lane = {"continuous": {"strategy": "continuous", "max_num_seqs": 4}, "static": {"strategy": "static"}}
        return {"engines": {name: {"num_running": self.running, "max_model_len": 512, "config": cfg}
                            for name, cfg in lane.items()}}

    def send(self, prompt, params, client=None, priority=0, **_):
        self.sent.append((priority, self.running))
        return []

    wait_ready = start_run = confirm = lambda self, *a: None


def test_the_urgent_request_is_sent_once_every_lane_runs_a_full_batch():
    """Scenario 9's lesson (priority preempts for it) needs a full batch when it arrives, on any engine's speed:
    a fast one finished the first four before a fixed 0.2 s had passed."""
    from engine.workshop.scenarios.runner import StreamRunner
    s = by_key("urgent")
    assert [(a.priority, a.when_batch_full) for a in s.arrivals][-1] == (-1, True)
    assert not any(a.when_batch_full for a in s.arrivals[:-1])
    svc = _FillingService()
    StreamRunner(svc, s).run()
    assert svc.sent == [(0, 0)] * 12 + [(-1, 4)]


def test_a_full_batch_is_judged_on_the_lanes_that_serve():
    from engine.workshop.scenarios.runner import batches_full
    lane = lambda running, **cfg: {"num_running": running, "ready": True,  # noqa: E731
                                   "config": {"strategy": "continuous", "max_num_seqs": 4, **cfg}}
    assert batches_full({"a": lane(4), "b": lane(1, strategy="static"), "c": lane(1, disaggregated=True)})
    assert not batches_full({"a": lane(4), "b": lane(3)})
    assert batches_full({"a": lane(4), "b": {**lane(0), "ready": False}, "c": {**lane(0), "error": "no GPU"}})


def test_shared_system_prompt_is_shared_and_each_question_its_own():
    s = by_key("shared-system-prompt")
    systems = {a.messages[0] for a in s.arrivals}
    questions = [a.messages[-1] for a in s.arrivals]
    assert len(systems) == 1 and next(iter(systems))[0] == "system" and len(next(iter(systems))[1]) > 1500
    assert len(set(questions)) == len(questions) and all(role == "user" for role, _ in questions)


def _shipped_files():
    from engine.workshop.scenarios import SCENARIO_DIR
    return sorted(SCENARIO_DIR.glob("*.toml"))


GOOD = """title = "t"\nwatch = "w"\nexplain = "e"\n[lanes.a]\nstrategy = "continuous"\n"""


@pytest.mark.parametrize("body,field", [
    ('title = "t"\nwatch = "w"\n', "explain"),
    (GOOD + "[[requests]]\nprompt_len = 8\n", "requests[0].max_tokens"),
    (GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 0\n", "requests[0].max_tokens"),
    (GOOD + "[[requests]]\nmax_tokens = 8\n", "requests[0]: give prompt_len (token ids), text, or prompts"),
    (GOOD + '[[requests]]\nprompts = "mine"\nmax_tokens = 8\nprompt_tokens = [1, 9]\n', "requests[0].prompts"),
    (GOOD + '[[requests]]\nprompts = "bundled"\nmax_tokens = 8\nprompt_tokens = [9, 1]\n',
     "requests[0].prompt_tokens"),
    (GOOD + '[[requests]]\nprompts = "bundled"\nmax_tokens = 9000\nprompt_tokens = [1, 9]\n',
     "requests[0].max_tokens: no bundled prompt"),
    (GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\nspeed = 1\n", "requests[0].speed: unknown field"),
    (GOOD + "[[requests]]\nprompt_len = [8, true]\nmax_tokens = 4\n", "requests[0].prompt_len"),
    (GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\npoisson_rate = 0\n", "requests[0].poisson_rate"),
    (GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\nshared_prefix = 8\n", "requests[0].shared_prefix"),
    (GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\nwhen_batch_full = 1\n", "requests[0].when_batch_full"),
    (GOOD + '[[requests]]\nprompt_len = 8\ntext = "hi"\nmax_tokens = 4\n', "requests[0].prompt_len"),
    (GOOD.replace('"continuous"', '"fast"') + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\n",
     "lanes.a: EngineConfig.strategy"),
    (GOOD + "block = 4\n[[requests]]\nprompt_len = 8\nmax_tokens = 4\n", "lanes.a: unknown EngineConfig field"),
    (GOOD + '[lanes."a<b>"]\n[[requests]]\nprompt_len = 8\nmax_tokens = 4\n', "lanes.a<b>: lane name"),
    (GOOD.replace('"continuous"', '"static"') + "[[requests]]\ncount = 3\nprompt_len = 8\nmax_tokens = 4\n",
     "requests.count: 3 arrivals in all"),
    ("title = [", "1-bad.toml: "),
    ('headline = ["speed"]\n' + GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\n",
     "headline: 'speed' is not a live metric"),
    ("headline = []\n" + GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\n", "headline: must be a list"),
    # before tomllib: a value nested too deep or a number too long, named with its table and key
    (GOOD + "[[requests]]\nprompt_len = " + "[" * 9 + "1" + "]" * 9 + "\n", "line 7: [requests] prompt_len: nested"),
    (GOOD + "[[requests]]\nmax_tokens = " + "9" * 41 + "\n", "line 7: [requests] max_tokens: a number of more than"),
    *((GOOD + "[[requests]]\nprompt_len = 8\nmax_tokens = 4\n[[claims]]\n" + claim, field) for claim, field in [
        ('says = "x"\nlane = "a"\nnumber = "preemptions"\nequals = 0\n', "claims[0].says: must quote"),
        ('says = "w"\nlane = "b"\nnumber = "preemptions"\nequals = 0\n', "claims[0].lane: 'b' is not one of the lanes"),
        ('says = "w"\nlane = ["a"]\nnumber = "preemptions"\nequals = 0\n', "claims[0].lane: ['a']"),
        ('says = "w"\nlane = "a"\nnumber = ["x"]\nequals = 0\n', "claims[0].number"),
        ('says = "w"\nlane = "a"\nnumber = "speed"\nequals = 0\n', "claims[0].number"),
        ('says = "w"\nlane = "a"\nnumber = "preemptions"\nequals = 0\nabove = 1\n', "claims[0]: give exactly one"),
        ('says = "w"\nlane = "a"\nnumber = "preemptions"\nbetter_than = "a"\n', "claims[0].better_than"),
        ('says = "w"\nlane = "a"\nnumber = "preemptions"\nequals = "0"\n', "claims[0].equals: must be a number"),
        ('says = "w"\nsame_answers = ["a"]\n', "claims[0].same_answers"),
        ('says = "w"\nsame_answers = ["a", "a"]\nwhy = 1\n', "claims[0].why: unknown field"),
        ('says = "w"\nsame_answers = ["a", "a"]\ndefault_model = "yes"\n', "claims[0].default_model"),
        ('says = "w"\nlane = "a"\nnumber = "ttft_p50_s"\ntenant = "t"\nequals = 0\n', "claims[0].tenant"),
    ]),
])
def test_loader_errors_name_the_file_and_the_field(tmp_path, body, field):
    path = tmp_path / "1-bad.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(ScenarioError) as e:
        load_scenarios(tmp_path)
    assert str(e.value).startswith("1-bad.toml: ") and field in str(e.value), str(e.value)


def test_a_request_waiting_for_full_batches_goes_after_the_ones_sent_at_its_time(tmp_path):
    (tmp_path / "x.toml").write_text(GOOD + "[[requests]]\nwhen_batch_full = true\nprompt_len = 8\nmax_tokens = 4\n"
                                     "priority = -1\n[[requests]]\ncount = 3\nprompt_len = 8\nmax_tokens = 4\n")
    (s,) = load_scenarios(tmp_path)
    assert [(a.when_batch_full, a.priority) for a in s.arrivals] == [(False, 0)] * 3 + [(True, -1)]


def test_a_text_prompt_and_a_poisson_group_load(tmp_path):
    (tmp_path / "x.toml").write_text(GOOD + '[[requests]]\ncount = 4\npoisson_rate = 1.5\nseed = 3\n'
                                     'text = "Why is the sky blue?"\nprompt_tokens = [30, 40]\nmax_tokens = 8\n'
                                     'tenant = "room"\n')
    (s,) = load_scenarios(tmp_path)
    assert [a.chat() for a in s.arrivals] == [[{"role": "user", "content": "Why is the sky blue?"}]] * 4
    assert s.presenter_only and s.arrivals[0].prompt_tokens == (30, 40)
    assert s.fitted(Fit(16))[0].max_tokens == 4 and s.fitted(Fit(16))[0].prompt_len == 0


def test_every_bundled_prompt_has_its_answer_length_measured():
    from engine.workshop.prompts import load_prompts
    rows = load_prompts()
    assert all(isinstance(r.get("answer_tokens"), int) and r["answer_tokens"] > 0 for r in rows)
    assert max(r["answer_tokens"] for r in rows) >= 1.25 * max(a.max_tokens for s in shipped() for a in s.arrivals)


@pytest.mark.default_model
def test_each_scenario_sends_the_prompt_lengths_its_lesson_states():
    """Tokenized as the engine does, with the default model's own chat template."""
    from transformers import AutoTokenizer

    from engine.config import DEFAULT_MODEL
    from engine.detokenizer import apply_chat_template
    from engine.model.files.loader import resolve_model_dir
    tok = AutoTokenizer.from_pretrained(resolve_model_dir(DEFAULT_MODEL))
    for s in shipped():
        for a in s.arrivals:
            n, (lo, hi) = len(apply_chat_template(tok, a.chat())), a.prompt_tokens
            assert lo <= n <= hi, f"{s.key}: a prompt of {n} tokens, the scenario states {lo} to {hi}"


def test_a_run_headline_names_the_worse_lane_and_the_ratio():
    summaries = {"continuous": {"duration_s": 4.0, "output_tokens_per_s": 90.0, "preemptions": 0},
                 "static": {"duration_s": 9.2, "output_tokens_per_s": 40.0, "preemptions": 3}}
    assert run_headline(METRICS["duration_s"], summaries) == \
        "static needed 2.30x the time continuous took for the same requests"
    assert run_headline(METRICS["output_tokens_per_s"], summaries) == "continuous's Throughput was 2.25x static's"
    assert run_headline(METRICS["preemptions"], summaries) is None  # nothing to divide by: not said
    assert run_headline(METRICS["duration_s"], {"continuous": summaries["continuous"]}) is None
    summaries["continuous"].update(num_steps=107, mean_step_ms=150.0)
    summaries["static"].update(num_steps=192, mean_step_ms=170.0)
    assert run_headline(METRICS["duration_s"], summaries) == (
        "static needed 2.30x the time continuous took for the same requests: 1.79x the iterations (192 vs 107) "
        "at 1.13x the time per iteration (170 vs 150 ms)")
    summaries["continuous"]["output_tokens"], summaries["static"]["output_tokens"] = 960, 768
    assert run_headline(METRICS["output_tokens_per_s"], summaries) == (
        "continuous's Throughput was 2.25x static's: 2.24x the output tokens per iteration (9.0 vs 4.0) "
        "at 0.88x the time per iteration (150 vs 170 ms)")


def test_a_busier_machine_shows_as_drift_not_as_a_result():
    """Static's second batch ran 750-875 ms steps against 150 ms in its first (a busy machine): the same
    decode steps got 5x slower, which step_time_drift measures and the cards then say; a lane whose steps
    only changed size (fewer rows) has not drifted."""
    from engine.telemetry.metrics import step_time_drift
    from engine.telemetry.records import StepSample
    from engine.workshop.scenarios.headline import drift_warning

    def steps(rows_ms):
        out, t = [], 0.0
        for rows, ms in rows_ms:
            out.append(StepSample(t, t + ms / 1000, rows, rows, 0, rows, 0))
            t += ms / 1000
        return out
    busy = steps([(8, 150)] * 20 + [(8, 800)] * 20)
    shrinking = steps([(8, 150)] * 12 + [(4, 100)] * 12 + [(2, 80)] * 12)
    assert step_time_drift(busy) == pytest.approx(800 / 150)
    assert step_time_drift(shrinking) == pytest.approx(1.0)
    assert step_time_drift(steps([(8, 150)] * 5)) is None  # too few to tell
    said = drift_warning({"static": {"step_time_drift": 5.3}, "continuous": {"step_time_drift": 1.1}})
    assert said.startswith("Iterations of the same size got slower") and "static's 5.3x" in said
    assert "continuous" not in said and drift_warning({"static": {"step_time_drift": None}}) is None


def test_a_claim_fails_when_its_run_contradicts_it():
    """Judged on the run, not assumed: answers that differ, a number on the wrong side of its bound or of the
    other lane, a number the run never produced; a tie only satisfies as_good_as."""
    from engine.events import FinishedEvent
    from engine.workshop.scenarios.claims import Claim, check

    def answer(lane, rid, text):
        return FinishedEvent(lane=lane, request_id=rid, finish_reason="length", error=None, text=text,
                             num_prompt_tokens=1, num_output_tokens=1, arrival_s=0.0, first_token_s=0.0, finish_s=0.0)
    events = [answer("a", 1, "same"), answer("b", 1, "same"), answer("a", 2, "I'm glad"), answer("b", 2, "I'm really")]
    summaries = {"a": {"preemptions": 0, "ttft_p50_s": 1.0, "slo_attainment_pct": 100.0},
                 "b": {"preemptions": 3, "ttft_p50_s": 1.0, "slo_attainment_pct": 100.0}}
    claims = [Claim("s", same_answers=("a", "b")), Claim("s", "b", "preemptions", "equals", 0),
              Claim("s", "a", "ttft_p50_s", "better_than", "b"), Claim("s", "a", "slo_attainment_pct", "as_good_as", "b"),
              Claim("s", "a", "swap_mb", "above", 0), Claim("s", "b", "preemptions", "above", 0),
              Claim("s", same_answers=("a", "b"), default_model=True)]
    verdicts = check(claims, summaries, events, default_model=False)
    assert [v.holds for v in verdicts] == [False, False, False, True, False, True, None]
    assert "request 2 differs" in verdicts[0].line() and verdicts[0].line().startswith("FAILS")
