"""A reader the browser sessions share: one session reads it while another's rerun waits to fold into it."""
from __future__ import annotations

import threading

from engine.event_hub import EventHub
from engine.events import RequestEvent
from engine.telemetry.kv_stats import KVStats
from pages.ui.hub_reader import shared_reader


def request(rid: int) -> RequestEvent:
    return RequestEvent(lane="a", strategy="continuous", request_id=rid, tag="t", prompt=None, messages=None,
                        num_prompt_tokens=4, max_tokens=8, arrival_s=0.0)


def test_a_session_reading_the_shared_reader_holds_off_another_sessions_fold():
    hub = EventHub()
    hub.publish(request(1))
    folded, seen = threading.Event(), []

    def other_session():
        with shared_reader("kv_stats", KVStats, hub) as other:
            folded.set()
            seen.append(set(other.max_total))

    with shared_reader("kv_stats", KVStats, hub) as stats:
        assert set(stats.max_total) == {1}
        hub.publish(request(2))
        t = threading.Thread(target=other_session)
        t.start()
        assert not folded.wait(0.3)  # it waits for this session's block to end
        assert set(stats.max_total) == {1}  # nothing folded under this session's reads
    t.join(5)
    assert seen == [{1, 2}]  # the other session folded the new request once the block ended
