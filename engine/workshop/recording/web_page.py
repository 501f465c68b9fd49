"""A recording as one web page anyone can open: the live views (their HTML, CSS and JS inline), the
recorded events embedded as they were sent (chunk by chunk, compressed: the page unpacks a chunk as the
playhead nears it, so a long recording opens at once), and a player with play, pause, speed and seek
(assets/replay/player.js). No server and no network: the views' socket is a stand-in that never connects,
and the player hands them the events at the recorded pacing.

    python -m engine.workshop.recording html run.jsonl.gz -o demo.html
"""
from __future__ import annotations

import base64
import gzip
import html
import json

from ...events import wire_contract
from ...paths import ASSETS, LIVE_VIEW, live_view_script
from .format import Events, Recording
from .replayer import SPEED_STEPS, Replayer, recorded_lanes

SILENT_SOCKET = """window.WebSocket = class {  // no server behind this page: the views' socket never connects
  static OPEN = 1;
  constructor() { this.readyState = 0; }
  send() {}
  close() {}
};"""
PLAYER_CSS = """body { margin: 0; background: #0b0f17; color: #dfe6f2; font: 14px system-ui, sans-serif; }
.ifl-player { display: flex; gap: 12px; align-items: center; padding: 8px 12px; border-bottom: 1px solid #263042; }
.ifl-player .ifl-seek { flex: 1; }"""


def web_page(recording: Recording) -> str:
    """The page's HTML, whole (every chunk checked first: RecordingError says where one is wrong)."""
    lanes, headers = recorded_lanes(recording)
    data = {"start": recording.start, "end": recording.end,
            "chunks": [{"t0": c.t0, "t1": c.t1} for c in recording.chunks],
            "status": Replayer(recording, clock=lambda: 0.0).status(),  # at the start (the player moves it)
            "view": {"lanes": lanes, "headers": headers, "contract": wire_contract(), "axis": "time"}}
    embedded = json.dumps(data).replace("<", "\\u003c")  # recorded text never ends the script
    packed = "".join(f'<script type="application/octet-stream" id="ifl-chunk-{i}">{_packed(c)}</script>\n'
                     for i, c in enumerate(map(recording.chunk, range(len(recording.chunks)))))
    speeds = "".join(f'<option value="{s:g}"{" selected" if s == 1 else ""}>{s:g}x</option>' for s in SPEED_STEPS)
    label = html.escape(recording.label)
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{label}</title>\n'
            f"<style>{PLAYER_CSS}\n{_read(LIVE_VIEW / 'live_view.css')}</style></head><body>\n"
            f'<div class="ifl-player"><button class="ifl-play">Pause</button>'
            f'<select class="ifl-speed" aria-label="speed">{speeds}</select>'
            f'<input class="ifl-seek" type="range" min="0" step="0.1" aria-label="position">'
            f'<span class="ifl-at"></span></div>\n'
            f'<div id="host">{_read(LIVE_VIEW / "live_view.html")}</div>\n'
            f'<script type="application/json" id="ifl-recording">{embedded}</script>\n{packed}'
            f"<script>\n{SILENT_SOCKET}\n{live_view_script()}\n{_read(ASSETS / 'replay' / 'player.js')}\n</script>\n"
            f"</body></html>\n")


def _packed(events: Events) -> str:
    """A checked chunk as the page carries it: the JSON array of its [time, event] pairs, gzipped, in
    base64 (the player unpacks a chunk as the playhead nears it; base64 never ends a script)."""
    pairs = ",".join(f"[{t!r},{text}]" for t, text in zip(events.times, events.texts))
    return base64.b64encode(gzip.compress(f"[{pairs}]".encode(), compresslevel=6, mtime=0)).decode("ascii")


def _read(path) -> str:
    return path.read_text(encoding="utf-8")
