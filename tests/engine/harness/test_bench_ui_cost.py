"""The browser-cost benchmark's report: slowdowns are paired per round against that round's 0-tab run."""
from __future__ import annotations

from engine.harness.ui_cost import report


def _rec(rnd, tabs, ms, fps=None, frame=None, cpu=0.0):
    socket = {"socket_kb_per_s": 512.4, "wire_kb_per_s": 61.2, "deflate": "permessage-deflate",
              "socket_messages_per_s": 30.0, "steps_per_s": 120.0, "key_frames": 9,
              "recording_mb_per_min": 40.04, "recording_gzip_mb_per_min": 4.06}
    return {"round": rnd, "tabs": tabs, "fps_p50": fps, "frame_ms_mean": frame, "browser_cpu_pct": cpu,
            "socket": socket, "strategies": {"continuous": {"decode_step_ms_p50": ms, "tokens_per_s": 50.0,
                                                           "steps": 120, "wall_s": 2.0}}}


def test_report_pairs_rounds_and_takes_the_median():
    recs = [_rec(0, 0, 100), _rec(0, 2, 110, 25, 4.0, 60), _rec(1, 0, 200), _rec(1, 2, 260, 21, 5.0, 80),
            _rec(2, 0, 100), _rec(2, 2, 120, 23, 6.0, 70)]
    out = report(recs)
    summary = out.split("\n\n")[1].splitlines()[-1]
    # per round: +10%, +30%, +20% -> median +20% (not the +35% the unpaired means would give)
    assert summary == "2 | +20.0% | 23.0 | 5.0 | 70"
    assert "1 | 2 | continuous | 260.0 | +30.0% | 60 | 50.0 | 21.0 | 5.0 | 80" in out
    assert "1 | 2 | 512 | 61 (deflated) | 30 | 120 | 9 | 40.0 | 4.1" in out  # what a tab's socket carried


def test_thread_spy_groups_each_threads_cpu_and_counts_threads_gone_between_polls():
    from engine.harness.thread_spy import share_of_core, thread_names
    raw = ("thread (11): inflight-continuous;Thread._bootstrap (threading.py:1002);step (e.py:3) 40\n"
           "thread (12): MainThread;run (a.py:1) 7\n"
           "thread (13): ScriptRunner.scriptThread;run (s.py:2) 3\n"
           "thread (11): inflight-continuous;other (e.py:9) 1\n"
           "thread (12): MainThread 2\n")  # (a stack of the thread's line alone)
    names = thread_names(raw)
    assert names == {11: "inflight-continuous", 12: "MainThread", 13: "ScriptRunner.scriptThread"}
    # (thread id, start) -> CPU s; 14: no Python thread (torch's pool); 13 began after the first poll, and
    # so did a second thread 12 once the first had ended: each counted whole, not one less the other
    first = {(11, 1): 10.0, (12, 1): 1.0, (14, 1): 3.0}
    last = {(11, 1): 15.0, (12, 1): 2.0, (13, 5): 0.5, (14, 1): 3.5, (12, 7): 0.25}
    pct = share_of_core(first, last, total_s=8.25, names=names, wall_s=10.0)
    assert pct == {"engines": 50.0, "native": 5.0, "server": 12.5, "sessions": 5.0, "short-lived": 10.0,
                   "other": 0.0}  # 8.25 s in all less the 7.25 polled: 1 s ran after threads' last polls


def test_report_adds_the_app_threads_table_where_the_rounds_were_spied():
    recs = [_rec(0, 0, 100), _rec(0, 2, 110, 25, 4.0, 60)]
    recs[0]["threads_pct"] = {"engines": 80.0, "native": 1.0, "server": 10.0, "sessions": 1.0, "short-lived": 0.0,
                              "other": 0.0}
    recs[1]["threads_pct"] = {**recs[0]["threads_pct"], "server": 14.0, "sessions": 5.5}
    out = report(recs)
    assert out.splitlines()[-2:] == ["0 | 80.0 | 1.0 | 10.0 | 1.0 | 0.0 | 0.0 | 1",
                                     "2 | 80.0 | 1.0 | 14.0 | 5.5 | 0.0 | 0.0 | 1"]
    assert "server (% of a core)" in out
