"""EngineService: threads, same stream on several strategies, pause/step, configure, faults."""
from __future__ import annotations

import threading

import pytest


from engine import SamplingParams
from engine.events import RequestEvent
from engine.serving.service import strategy_lanes
from engine_helpers import greedy, mixed_prompts
from service_helpers import assert_all_free, service_fixture, wait_settled
from tiny_models import reference_greedy


svc = service_fixture()


@pytest.fixture(autouse=True)
def _clean(svc):
    yield
    svc.resume()
    assert_all_free(svc)


def test_threads_submit_both_strategies_match_reference(svc, tiny_model_dirs):
    prompts, max_tokens = mixed_prompts(8)
    refs = reference_greedy(tiny_model_dirs["llama"], prompts, max_tokens)
    results = {}

    def client(i):
        hs = svc.submit(prompts[i], greedy(max_tokens[i]), tag=f"t{i}")
        results[i] = {h.lane: h.result(60) for h in hs}

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, ref in enumerate(refs):
        assert set(results[i]) == {"continuous", "dynamic"}
        for out in results[i].values():
            assert out.output_token_ids == ref


def test_same_request_id_and_arrival_on_every_strategy(svc):
    hs = svc.submit([5, 6, 7], greedy(3))
    outs = [h.result(30) for h in hs]
    assert len({h.request_id for h in hs}) == 1
    assert len({o.arrival_s for o in outs}) == 1


def test_stream_deltas_concatenate_to_text(svc):
    h = svc.submit("hello world", greedy(12), lanes=["continuous"])[0]
    text = "".join(h)
    assert text == h.result(5).text


def test_stop_string_never_streamed(svc):
    # Find what the model says, then stop on a piece of it: the stream must end before it.
    full = svc.submit("abc", greedy(20), lanes=["continuous"])[0].result(30).text
    stop = full[5:8]
    h = svc.submit("abc", SamplingParams(max_tokens=20, stop=stop), lanes=["continuous"])[0]
    streamed = "".join(h)
    out = h.result(5)
    assert out.finish_reason == "stop" and stop not in streamed and streamed == out.text


def test_priority_and_tenant_reach_every_lane(svc):
    since = svc.hub.head
    hs = svc.submit([5, 6, 7], greedy(2), priority=-3, tenant="team-a")
    assert all(h.result(30).finish_reason == "length" for h in hs)
    seen = {item.lane: (item.priority, item.tenant) for _, item in svc.hub.read(since).events
            if isinstance(item, RequestEvent) and item.request_id == hs[0].request_id}
    assert seen == {"continuous": (-3, "team-a"), "dynamic": (-3, "team-a")}
    with pytest.raises(ValueError, match="priority must be an integer"):
        svc.submit("hi", greedy(2), priority="high")
    with pytest.raises(ValueError, match="tenant must be a string"):
        svc.submit("hi", greedy(2), tenant="x" * 65)


def test_bad_input_rejected_everywhere(svc):
    with pytest.raises(ValueError, match="prompt is empty"):
        svc.submit("", greedy(4))
    with pytest.raises(ValueError, match="max_model_len"):
        svc.submit([5] * 100, greedy(60))
    with pytest.raises(ValueError, match="lane 'static' is not running"):
        svc.submit("hi", greedy(4), lanes=["static"])
    assert svc.submit("hi", greedy(2))[0].result(30).finish_reason == "length"


def test_pause_step_resume(svc):
    svc.pause()
    hs = svc.submit([9, 9, 9], greedy(5), lanes=["continuous"])
    w = svc.workers["continuous"]
    before = w.steps
    svc.step_once()
    import time
    time.sleep(0.5)
    assert w.steps == before + 1 and not hs[0].finished
    svc.resume()
    assert len(hs[0].result(30).output_token_ids) == 5


def test_abort_frees_blocks(svc):
    hs = svc.submit([5] * 20, greedy(60))
    next(iter(hs[0]))  # it is running
    svc.abort(hs[0].request_id)
    assert all(h.result(30).finish_reason == "abort" for h in hs)


def test_injected_step_exception_errors_and_recovers(svc):
    w = svc.workers["continuous"]
    real = w.engine.runner.launch
    calls = {"n": 0}

    def flaky(rows, cache):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected fault")
        return real(rows, cache)

    w.engine.runner.launch = flaky
    try:
        h = svc.submit([5, 6], greedy(10), lanes=["continuous"])[0]
        out = h.result(30)
        assert out.finish_reason == "error" and "injected fault" in out.error
        assert svc.submit([7, 8], greedy(4), lanes=["continuous"])[0].result(30).finish_reason == "length"
    finally:
        w.engine.runner.launch = real


def test_scheduler_exception_restarts_engine(svc):
    w = svc.workers["continuous"]
    sched = w.engine.scheduler
    real = sched.schedule

    def boom():
        sched.schedule = real
        raise RuntimeError("scheduler fault")

    sched.schedule = boom
    h = svc.submit([5, 6], greedy(10), lanes=["continuous"])[0]
    out = h.result(30)
    assert out.finish_reason == "error" and "scheduler fault" in out.error
    assert svc.submit([7, 8], greedy(4), lanes=["continuous"])[0].result(30).finish_reason == "length"


def test_configure_loses_nothing(svc):
    hs = svc.submit([5] * 10, greedy(30))
    svc.configure(block_size=8, max_num_seqs=4)
    late = svc.submit([6] * 10, greedy(5))  # queued while the engines drain
    assert all(h.result(60).finish_reason == "length" for h in hs + late)
    wait_settled(svc)
    assert svc.cfg.block_size == 8
    assert all(w.engine.cfg.block_size == 8 for w in svc.workers.values())
    # the new engines live long: a full collection does not walk them (engine/gc_pauses.py)
    import gc
    models = {id(w.engine.runner.model) for w in svc.workers.values()}
    assert not any(id(o) in models for o in gc.get_objects())
    with pytest.raises(ValueError, match="EngineConfig.block_size"):
        svc.configure(block_size=0)
    svc.configure(block_size=4, max_num_seqs=8)


def test_set_lanes_by_strategy(svc):
    svc.set_lanes(strategy_lanes(svc.cfg, ["continuous", "dynamic", "static"]))
    assert svc.lane_names == ["continuous", "dynamic", "static"]
    svc.set_lanes(strategy_lanes(svc.cfg, ["continuous", "dynamic"]))
    assert svc.lane_names == ["continuous", "dynamic"]


def test_both_kinds_of_lane_worker_keep_the_declared_protocol(svc):
    """The service holds local and remote lanes as LaneWorkers: a local lane's worker and a remote one (not
    started) each have every member the protocol declares."""
    from engine.serving.lane_worker import LaneWorker
    from engine.serving.remote.config import RemoteConfig
    from engine.serving.remote.lane import RemoteWorker
    remote = RemoteWorker(svc.host, "far", RemoteConfig("http://127.0.0.1:9/v1", "m"))
    for w in (*svc.workers.values(), remote):
        assert isinstance(w, LaneWorker), type(w)
