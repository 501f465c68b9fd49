"""A background thread that submits to the service until it is done or stopped (the load generator,
a scenario's request stream): it counts what went in and keeps the refusals for the page to show."""
from __future__ import annotations

import logging
import threading
from collections import deque

from engine.room.access import LOCAL, Client

log = logging.getLogger(__name__)


class Submitter(threading.Thread):
    def __init__(self, svc, name: str, client: Client = LOCAL):
        super().__init__(daemon=True, name=name)
        self.svc, self.client = svc, client
        self.halt = threading.Event()
        self.submitted = 0
        self.refused = 0
        self.errors: deque[str] = deque(maxlen=20)  # the latest refusals' reasons

    def submit(self, *args, **kwargs) -> None:
        """svc.submit as this thread's client; a refusal is kept, not raised."""
        try:
            self.svc.submit(*args, client=self.client, **kwargs)
            self.submitted += 1
        except (ValueError, TimeoutError) as e:
            self.errors.append(str(e))  # before the count: a reader that sees a refusal finds its reason
            self.refused += 1
            log.warning("%s: %s", self.name, e)

    def stop(self) -> None:
        self.halt.set()
