"""What a tab's live views were doing, for a harness wait that gives up: each live view on the page (its
socket's state, whether the service it follows was replaying a recording, its engines and whether each is
ready), so a failure says where the page stood instead of only that it timed out."""
from __future__ import annotations

PAGE_STATE = """() => [...document.querySelectorAll('.ifl-root')].map((r) => {
  const i = r.inflight, s = i && i.server.status;
  return { conn: i ? i.link.conn : null, closed: i ? i.closed : null, replay: s ? (s.replay || null) : null,
           engines: s ? Object.fromEntries(Object.entries(s.engines || {}).map(([n, e]) => [n, !!e.ready])) : null };
})"""


def wait_on_page(page, js: str, timeout_s: float, what: str):
    """page.wait_for_function(js) for at most timeout_s; if it gives up, a TimeoutError naming `what` and
    each live view's state (PAGE_STATE)."""
    from playwright.sync_api import TimeoutError as PageTimeout
    try:
        return page.wait_for_function(js, timeout=timeout_s * 1000)
    except PageTimeout:
        try:
            state = page.evaluate(PAGE_STATE)
        except Exception as e:  # noqa: BLE001 - the page itself may be gone; say so
            state = f"unreadable ({e})"
        raise TimeoutError(f"{what}: not within {timeout_s:g} s; the page's live views: {state}") from None
