"""The process's one EngineService, made on first use and kept in this module. Nothing re-imports it while
the app runs: Streamlit's file watcher, which unloads the app's modules when a file changes, is off
(.streamlit/config.toml), so a rerun never starts a second set of engines."""
from __future__ import annotations

import threading

from .service import EngineService

_lock = threading.Lock()
_service: EngineService | None = None


def get_service(factory=None) -> EngineService:
    """The process-wide service; the first call makes it (factory(), else EngineService())."""
    global _service
    with _lock:
        if _service is None:
            _service = (factory or EngineService)()
        return _service


def shutdown_service() -> None:
    """Stop the service (its engines and threads); the next get_service() makes a new one. Held under the
    lock: no second service starts while this one still holds its memory."""
    global _service
    with _lock:
        if _service is not None:
            _service.stop()
            _service = None
