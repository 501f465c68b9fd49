"""A harness wait on a page that gives up (engine/harness/page_state.py) says where the page's live views stood."""
from __future__ import annotations

import pytest

pytest.importorskip("playwright")
from playwright.sync_api import TimeoutError as PageTimeout  # noqa: E402

from engine.harness.page_state import PAGE_STATE, wait_on_page  # noqa: E402


class Page:
    """A page whose wait never comes true, with one live view stuck on a replay's status."""

    def __init__(self, state):
        self.state, self.asked = state, []

    def wait_for_function(self, js, timeout):
        self.asked.append(timeout)
        raise PageTimeout("Timeout exceeded")

    def evaluate(self, js):
        assert js == PAGE_STATE
        if isinstance(self.state, Exception):
            raise self.state
        return self.state


def test_a_wait_that_gives_up_names_what_it_waited_for_and_each_views_state():
    page = Page([{"conn": "reconnecting", "closed": False, "replay": {"label": "shipped"}, "engines": {"a": False}}])
    with pytest.raises(TimeoutError, match=r"engines live: not within 300 s; .*'conn': 'reconnecting'.*'shipped'"):
        wait_on_page(page, "() => false", 300, "engines live")
    assert page.asked == [300_000]


def test_a_page_that_cannot_be_read_says_so():
    with pytest.raises(TimeoutError, match="unreadable"):
        wait_on_page(Page(RuntimeError("Target closed")), "() => false", 1, "socket live")
