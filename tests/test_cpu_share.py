"""Lanes stepping together on the CPU split the cores instead of oversubscribing them."""
from __future__ import annotations

import threading

import torch

from engine.cpu_share import CoreShare, _omp_set_num_threads


def test_each_stepping_lane_gets_its_share_and_a_lone_lane_all_cores():
    share = CoreShare(cores=4, enabled=True)
    a, b, c = object(), object(), object()
    assert share.stepping(a) == 4
    assert share.stepping(b) == 2 and share.stepping(a) == 2
    assert share.stepping(c) == 1  # 4 // 3
    share.resting(b)
    share.resting(c)
    assert share.stepping(a) == 4
    off = CoreShare(cores=4, enabled=False)
    assert off.stepping(a) == 4 and off.stepping(b) == 4


def test_the_share_is_set_for_the_calling_thread_only():
    assert _omp_set_num_threads() is not None, "torch's OpenMP runtime should be found on Linux"
    before = torch.get_num_threads()
    # as a benchmark run in this process would: torch then sizes each new thread's team at its first op
    torch.set_num_threads(before)
    seen = {}

    def lane():
        share = CoreShare(cores=2, enabled=True)  # the test machine's cores may differ: say 2
        share.stepping("other lane")
        share.stepping("this lane")  # two lanes step: this thread's team shrinks to 1
        seen["lane"] = torch.get_num_threads()
        share.whole()  # measuring the device: every core, until the lane's next step
        seen["whole"] = torch.get_num_threads()
        share.stepping("this lane")
        seen["again"] = torch.get_num_threads()

    t = threading.Thread(target=lane)
    t.start()
    t.join()
    assert (seen["lane"], seen["whole"], seen["again"]) == (1, 2, 1)
    assert torch.get_num_threads() == before, "other threads keep their own setting"
