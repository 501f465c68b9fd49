"""A page that runs the live views on recorded events, without Streamlit or an engine, for browser tests.

The page holds the component's own HTML, CSS and JS (the files pages/ui/live_view.py ships) and mounts
it as Streamlit would, with a stand-in socket that never connects. Events go in through the instance's
applyEvents (`document.querySelector('.ifl-root').inflight`), as the socket would hand them over.
"""
from __future__ import annotations

import json

from ui.live_view import _read, JS_FILES

ENTRY = "export default function liveView"


def replay_html(data: dict) -> str:
    """The page, mounted with the component data `data` (lanes, views, mode, contract, ...)."""
    js = "\n".join(_read(name) for name in JS_FILES)
    assert ENTRY in js, "live_view.js no longer exports its entry point this way"
    js = js.replace(ENTRY, "function liveView")
    mount = (f"const host = document.getElementById('host');\n"
             f"liveView({{ parentElement: host, data: {json.dumps(data)}, setStateValue: () => {{}} }});")
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>body {{ margin: 0; background: #0b0f17; }}\n"
            f"{_read('live_view.css')}</style></head><body><div id='host'>{_read('live_view.html')}</div>\n"
            f"<script>\n{OFFLINE_SOCKET}\n{js}\n{mount}\n</script></body></html>")


# No server behind the page: a socket that stays closed (the view shows it reconnecting).
OFFLINE_SOCKET = """window.WebSocket = class { constructor() { setTimeout(() => this.onclose && this.onclose(), 0); }
  send() {} close() {} };"""
