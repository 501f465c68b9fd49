"""The live view's lifecycle as Streamlit drives it, in a real browser: Streamlit runs the component's entry
point on every data change and calls the cleanup it returned on unmount, and also for a run whose data a
newer run superseded while the module loaded; that late call may come after the newer run took the view."""
from __future__ import annotations

from live_replay import INST, accepted_events, browser, open_replay, rec  # noqa: F401

RUN = "data => liveView({ parentElement: document.getElementById('host'), data, setStateValue: () => {} })"
VIEW = f"() => {{ window.__view = {INST}; }}"  # kept: once unmounted, no selector finds it
CLOSED = "() => window.__view.closed"  # (its socket, timers and frame loop closed with it: destroyInstance)


def mounted(browser, rec):  # noqa: F811 - the fixture
    data = {"lanes": rec["lanes"], "contract": rec["contract"], "axis": "iterations"}
    page = open_replay(browser, rec, accepted_events(rec)[:50], **data)
    page.evaluate(VIEW)
    return page, data


def test_a_superseded_runs_late_cleanup_leaves_the_view_live_and_unmounting_closes_it(browser, rec):  # noqa: F811
    page, data = mounted(browser, rec)
    page.evaluate(f"data => {{ const run = {RUN}; const stale = run(data); window.__latest = run(data); stale(); }}",
                  data)
    assert page.evaluate(CLOSED) is False
    assert page.evaluate(f"() => {INST} === window.__view")  # the same view, still following its socket
    page.evaluate("() => { document.getElementById('host').remove(); window.__latest(); }")
    assert page.evaluate(CLOSED) is True
    page.close()


def test_a_view_whose_element_left_the_page_without_a_cleanup_closes_itself(browser, rec):  # noqa: F811
    page, _ = mounted(browser, rec)
    page.evaluate("() => document.getElementById('host').remove()")
    page.wait_for_function(CLOSED, timeout=10_000)  # (at its next status poll)
    page.close()
