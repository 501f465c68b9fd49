"""The presenter's room panel and trace button on the playground (AppTest), and the /join address."""
from __future__ import annotations


from streamlit.testing.v1 import AppTest

from engine.room.access import Access
from engine.api.join_link import join_url
from service_helpers import service_fixture
from repo_paths import ROOT

PAGE = ROOT / "pages" / "playground.py"


svc = service_fixture(registered=True)


def playground(svc, monkeypatch, room: bool, presenter: bool) -> AppTest:
    access = Access(room=room, token="presenter-token-panel")
    monkeypatch.setattr(access, "is_presenter", lambda _token: presenter)  # as if the cookie held the token
    monkeypatch.setattr(svc, "access", access)
    at = AppTest.from_file(str(PAGE), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def panel_shown(at: AppTest) -> bool:
    return any(e.label == "Let the room join" for e in at.sidebar.expander)


def test_presenter_in_a_room_sees_the_qr_code_url_and_who_joined(svc, monkeypatch):
    svc.participants.count("ip:1", "Ada", 1.0)
    svc.participants.count("ip:1", "Ada", 2.0)
    at = playground(svc, monkeypatch, room=True, presenter=True)
    assert panel_shown(at) and len(at.sidebar.get("image")) == 1
    assert any(m.value.endswith(":8501/join**") for m in at.sidebar.markdown)
    assert "cannot reach" in at.sidebar.warning[0].value  # the test app listens on loopback
    assert at.sidebar.metric[0].value == "1 person" and at.sidebar.metric[0].delta == "2 requests"
    assert list(at.sidebar.dataframe[0].value["name"]) == ["Ada"]


def test_viewers_and_loopback_get_no_panel_and_only_the_presenter_a_trace(svc, monkeypatch):
    viewer = playground(svc, monkeypatch, room=True, presenter=False)
    assert not panel_shown(viewer) and not viewer.sidebar.get("download_button")
    local = playground(svc, monkeypatch, room=False, presenter=True)
    assert not panel_shown(local)
    assert [b.proto.label for b in local.sidebar.get("download_button")] == ["Download trace (Perfetto)"]


def test_join_url_is_one_a_phone_can_reach():
    assert join_url("http://192.168.1.4:8501/", "0.0.0.0", 8501, {}) == "http://192.168.1.4:8501/join"
    assert join_url("http://localhost:8501/", "10.0.0.5", 8501, {}) == "http://10.0.0.5:8501/join"
    lan = join_url("http://localhost:8501/", "0.0.0.0", 8502, {})
    assert lan.startswith("http://") and lan.endswith(":8502/join") and "localhost" not in lan
    assert join_url(None, "::", 1, {"INFLIGHT_PUBLIC_URL": "https://room.example/"}) == "https://room.example/join"
