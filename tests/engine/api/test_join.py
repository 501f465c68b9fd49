"""/join on a real server in room mode: the page, a phone's prompt streamed back, its name on the
request event, the participant count, and the room's limits and length checks answered kindly."""
from __future__ import annotations

import json
import time

import httpx
import pytest

from engine.room.access import PRESENTER_COOKIE, Access
from engine.api.join_route import MAX_PROMPT_CHARS
from engine.room.limits import ClientLimits
from engine.room.participants import MAX_NAME_CHARS, Participants, clean_name
from engine.events import FinishedEvent, RequestEvent
from service_helpers import app_fixture, clean_fixture, service_fixture

TOKEN = "presenter-token-join-1"
LIMITS = ClientLimits(burst=4, per_minute=600, max_in_flight=1, max_tokens=12)


svc = service_fixture(access=Access(room=True, token=TOKEN), limits=LIMITS)
base = app_fixture("base")


_clean = clean_fixture(LIMITS)


def ask(base, name="Ada", prompt="Hello there", **kw) -> httpx.Response:
    return httpx.post(f"{base}/join/ask", json={"name": name, "prompt": prompt}, timeout=60, **kw)


def sse(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: ")]


def test_page_and_its_files_are_served_with_the_limits_filled_in(base):
    page = httpx.get(f"{base}/join")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert f'maxlength="{MAX_NAME_CHARS}"' in page.text and f'maxlength="{MAX_PROMPT_CHARS}"' in page.text
    assert "at most 12 tokens" in page.text and "{{" not in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(f"{base}/join/join.js").headers["content-type"].startswith("text/javascript")
    assert httpx.get(f"{base}/join/join.css").status_code == 200
    assert httpx.get(f"{base}/join/app.py").status_code == 404


def test_a_phone_prompt_streams_back_and_carries_the_name(svc, base):
    cursor, before = svc.hub.head, svc.participants.summary()
    r = ask(base, name="  Ada   Lovelace ")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    msgs = sse(r.text)
    rid = msgs[0]["request_id"]
    assert msgs[-1]["finish_reason"] in ("length", "stop")
    text = "".join(m.get("text", "") for m in msgs)
    requests = [e for _, e in svc.hub.read(cursor).events if isinstance(e, RequestEvent) and e.request_id == rid]
    assert {e.lane for e in requests} == set(svc.lane_names)  # on every lane, so in every view
    assert all(e.name == "Ada Lovelace" and e.tag == "join" for e in requests)
    finished = next(e for _, e in svc.hub.read(cursor).events
                    if isinstance(e, FinishedEvent) and e.request_id == rid and e.lane == svc.lane_names[0])
    assert finished.text == text
    after = svc.status()["room"]
    assert after["requests"] == before["requests"] + 1
    assert after["participants"] == max(1, before["participants"])  # one phone (one IP) however often it asks


def test_room_limits_are_answered_with_a_reason(svc, base):
    svc.set_slow_motion(0.3)
    with httpx.stream("POST", f"{base}/join/ask", json={"name": "Bo", "prompt": "first"}, timeout=60) as first:
        assert first.status_code == 200
        second = ask(base, name="Bo", prompt="second")
        assert second.status_code == 429 and "still running" in second.json()["error"]
        svc.set_slow_motion(0)
        first.read()
    # the presenter's cookie lifts the limits (a second at once is fine while one runs)
    svc.set_slow_motion(0.3)
    with httpx.stream("POST", f"{base}/join/ask", json={"name": "Bo", "prompt": "again"}, timeout=60) as one:
        assert ask(base, name="Host", cookies={PRESENTER_COOKIE: TOKEN}).status_code == 200
        svc.set_slow_motion(0)
        one.read()


@pytest.mark.parametrize("body, status, words", [
    ({"name": "", "prompt": "hi"}, 400, "give a name"),
    ({"name": "x" * (MAX_NAME_CHARS + 1), "prompt": "hi"}, 400, "at most"),
    ({"name": "evil\u202eman", "prompt": "hi"}, 400, "cannot be shown"),
    ({"name": 7, "prompt": "hi"}, 400, "string"),
    ({"name": "Ada", "prompt": "   "}, 400, "write a prompt"),
    ({"name": "Ada", "prompt": "y" * (MAX_PROMPT_CHARS + 1)}, 413, "at most"),
])
def test_bad_input_is_refused_before_anything_is_queued(svc, base, body, status, words):
    cursor = svc.hub.head
    r = httpx.post(f"{base}/join/ask", json=body, timeout=30)
    assert r.status_code == status and words in r.json()["error"]
    assert not [e for _, e in svc.hub.read(cursor).events if isinstance(e, RequestEvent)]


def test_cross_site_posts_and_forms_are_refused(base):
    foreign = httpx.post(f"{base}/join/ask", json={"name": "a", "prompt": "b"},
                         headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    form = httpx.post(f"{base}/join/ask", content=b'{"name":"a","prompt":"b"}', headers={"Content-Type": "text/plain"})
    assert form.status_code == 415


def test_a_phone_that_leaves_has_its_request_aborted(svc, base):
    svc.set_slow_motion(0.2)
    cursor = svc.hub.head
    with httpx.stream("POST", f"{base}/join/ask", json={"name": "Cy", "prompt": "long"}, timeout=60) as r:
        rid = json.loads(next(r.iter_lines())[6:])["request_id"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ended = [e for _, e in svc.hub.read(cursor).events if isinstance(e, FinishedEvent) and e.request_id == rid]
        if len(ended) == len(svc.lane_names):
            break
        time.sleep(0.05)
    assert {e.finish_reason for e in ended} == {"abort"}


def test_names_are_cleaned_and_participants_counted_by_client():
    assert clean_name("  Ada \t Lovelace ") == "Ada Lovelace"
    assert clean_name("<b>Zoë</b>") == "<b>Zoë</b>"  # text, shown as text: nothing to strip
    for bad in ("", "   ", "a\nb\x00", "x" * (MAX_NAME_CHARS + 1), None):
        with pytest.raises(ValueError):
            clean_name(bad)
    p = Participants()
    p.count("ip:1", "Ada", 1.0)
    p.count("ip:1", "Ada L", 2.0)
    p.count("ip:2", "Bo", 3.0)
    assert p.summary() == {"participants": 2, "requests": 3}
    assert [(r.name, r.requests) for r in p.table()] == [("Ada L", 2), ("Bo", 1)]
