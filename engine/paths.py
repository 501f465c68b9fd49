"""Where the repository's shipped files live (scenarios, prompts, recordings, model configs, pages)."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# a checkout's assets/, or, installed from a wheel, the same files as the package inflight.assets (setup.py)
ASSETS = REPO / "assets" if (REPO / "assets").is_dir() else REPO / "inflight" / "assets"
LIVE_VIEW = ASSETS / "live"  # the live views' browser code: live_view.html, .css and the .js modules
LIVE_VIEW_ENTRY = "export default function liveView"


def live_view_js() -> str:
    """The live views' JS modules in one script, in name order (they find each other by name:
    assets/live/modules.js), as the page ships it and the browser tests load it."""
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(LIVE_VIEW.glob("*.js")))


def live_view_script() -> str:
    """The same as a plain script for a page of its own (the browser tests, a recording's web page): its
    entry point a global function liveView(component) instead of the module's default export."""
    js = live_view_js()
    if LIVE_VIEW_ENTRY not in js:
        raise RuntimeError("assets/live/live_view.js no longer exports its entry point as expected")
    return js.replace(LIVE_VIEW_ENTRY, "function liveView")

