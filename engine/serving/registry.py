"""The process's one EngineService, made on first use and kept here, in a module that holds nothing else:
Streamlit re-imports a module that was edited while the app runs, and a service kept beside the code that
changes would be forgotten, and a second set of engines started."""
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
    """Stop the service (its engines and threads); the next get_service() makes a new one."""
    global _service
    with _lock:
        svc, _service = _service, None
    if svc is not None:
        svc.stop()
