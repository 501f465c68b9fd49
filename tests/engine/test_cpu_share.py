"""Lanes stepping together on the CPU split the cores instead of oversubscribing them, and a lane's
thread never keeps a team of OpenMP workers parked beyond its share."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.cpu_share import CoreShare, _omp_set_num_threads


def _helpers_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("inflight-team-")]


def _in_lane_thread(fn):
    """Run fn in a fresh thread, as a lane's worker would; returns what it returns."""
    box = {}

    def lane():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test
            box["error"] = e

    t = threading.Thread(target=lane)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_each_stepping_lane_gets_its_share_and_a_lone_lane_all_cores():
    share = CoreShare(cores=4, enabled=True)
    a, b, c = object(), object(), object()
    assert share.share(a) == 4
    assert share.share(b) == 2 and share.share(a) == 2
    assert share.share(c) == 1  # 4 // 3
    share.resting(b)
    share.resting(c)
    assert share.share(a) == 4
    off = CoreShare(cores=4, enabled=False)
    assert off.share(a) == 4 and off.share(b) == 4


def test_a_lane_of_two_engines_counts_once_and_its_halves_take_turns_below_a_core_each():
    """A disaggregated lane's halves (engine/disaggregated.py) step at once on half the lane's share each;
    beside another lane on 2 cores the lane has one core, so they take turns: never 3 threads on 2 cores."""
    share = CoreShare(cores=2, enabled=True)
    lane, prefill, decode, other = object(), object(), object(), object()
    assert share.share(prefill, group=lane, fraction=0.5) == 1 and share.share(decode, group=lane, fraction=0.5) == 1
    turns = threading.Lock()
    both_in = threading.Barrier(2, timeout=5)

    def together(half):  # alone, the halves run at once: both reach the barrier
        return share.run(half, both_in.wait, group=lane, fraction=0.5, turns=turns)

    threads = [threading.Thread(target=together, args=(h,)) for h in (prefill, decode)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not both_in.broken
    share.share(other)  # a second lane: the disaggregated one has 1 core, 0.5 a half
    inside, most = [0], [0]
    guard = threading.Lock()

    def step():
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.02)
        with guard:
            inside[0] -= 1

    def half_steps(half):
        for _ in range(10):
            share.run(half, step, group=lane, fraction=0.5, turns=turns)

    threads = [threading.Thread(target=half_steps, args=(h,)) for h in (prefill, decode)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def where():
    return threading.current_thread(), torch.get_num_threads()


def test_a_lone_lane_steps_on_every_core_and_lanes_together_on_their_own_thread():
    assert _omp_set_num_threads() is not None, "torch's OpenMP runtime should be found on Linux"
    share = CoreShare(cores=2, enabled=True)  # the test machine's cores may differ: say 2

    def lane():
        share.lane_thread()
        me = threading.current_thread()
        seen = {"own team": torch.get_num_threads(), "alone": share.run("a", where)}
        share.share("b")  # a second lane starts stepping
        seen["together"] = share.run("a", where)
        share.resting("b")
        seen["alone again"] = share.run("a", where)
        share.resting("a")
        seen["helpers resting"] = _helpers_alive()
        return me, seen

    me, seen = _in_lane_thread(lane)
    assert seen["own team"] == 1
    helper, threads = seen["alone"]
    assert helper is not me and threads == 2, "alone: a helper thread leading a team of every core"
    assert seen["together"] == (me, 1), "together: the lane's own thread, one core"
    assert seen["alone again"] == (helper, 2), "the helper waited while its lane shared one core"
    assert seen["helpers resting"] == [], "a resting lane leaves no team parked"


def test_a_new_share_size_gets_a_new_helper():
    share = CoreShare(cores=4, enabled=True)

    def lane():
        share.lane_thread()
        first = share.run("a", where)
        share.share("b")
        second = share.run("a", where)  # 4 // 2 cores: a team of 2, on a new helper
        alive = _helpers_alive()
        share.resting("a")
        share.resting("b")
        return first, second, alive

    (first, n1), (second, n2), alive = _in_lane_thread(lane)
    assert (n1, n2) == (4, 2) and first is not second
    assert alive == ["inflight-team-2"], "the team of 4 exited before the team of 2 formed"


def test_a_failing_step_raises_in_the_lane_and_the_next_step_runs():
    share = CoreShare(cores=2, enabled=True)

    def lane():
        share.lane_thread()
        with pytest.raises(ZeroDivisionError):
            share.run("a", lambda: 1 / 0)
        value = share.run("a", lambda: 7)
        share.resting("a")
        return value

    assert _in_lane_thread(lane) == 7
    assert _helpers_alive() == []


def test_measuring_on_all_cores_leaves_the_callers_team_alone():
    share = CoreShare(cores=2, enabled=True)

    def lane():
        share.lane_thread()
        inside = share.on_all_cores(where)
        return threading.current_thread(), inside, torch.get_num_threads()

    me, (thread, threads), after = _in_lane_thread(lane)
    assert thread is not me and threads == 2
    assert after == 1
    assert _helpers_alive() == []
