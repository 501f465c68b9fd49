"""tab_trace's reading of a Chrome trace (the run itself needs chromium and the app: python -m
engine.harness.tab_trace)."""
from __future__ import annotations

from engine.harness.tab_trace import MAIN, TOP_LEVEL, main_thread_ms, render


def test_the_main_threads_slices_are_summed_by_name_per_second():
    meta = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 10, "args": {"name": MAIN}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "Compositor"}}]
    slices = [{"ph": "X", "name": TOP_LEVEL, "pid": 1, "tid": 10, "ts": 0, "dur": 3000},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 10, "ts": 0, "dur": 1000},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 10, "ts": 5000, "dur": 500},
              {"ph": "X", "name": "Commit", "pid": 1, "tid": 11, "ts": 0, "dur": 9000},  # another thread's
              {"ph": "B", "name": "Layout", "pid": 1, "tid": 10, "ts": 0}]  # (not a complete slice)
    per_s, busy = main_thread_ms({"traceEvents": meta + slices}, seconds=2.0)
    assert per_s == [(TOP_LEVEL, 1.5), ("Commit", 0.75)]
    assert busy == 3.0 / 1e3 / 2.0
    assert main_thread_ms(meta + slices, 2.0) == (per_s, busy)  # a bare list of events too
    text = render({"busy_share": busy, "seconds": 2.0, "ms_per_s": dict(per_s)})
    assert "busy 0% of 2 s" in text and "0.8  Commit" in text
