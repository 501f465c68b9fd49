"""A background thread that submits to the service until it is done or stopped (the load generator,
a scenario's request stream): it counts what went in and keeps the refusals for the page to show.

It keeps a schedule: each request is sent (svc.send) at its time and confirmed later, so an arrival
never waits for a lane's step to end (a static lane's 800 ms step once spread "16 at once" over 18 s)."""
from __future__ import annotations

import logging
import threading
from collections import deque

from engine.room.access import LOCAL, Client

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT_S = 60.0  # for the lanes to take what was sent, as svc.submit waits


class Submitter(threading.Thread):
    def __init__(self, svc, name: str, client: Client = LOCAL):
        super().__init__(daemon=True, name=name)
        self.svc, self.client = svc, client
        self.halt = threading.Event()
        self.submitted = 0  # taken by every lane
        self.refused = 0
        self.errors: deque[str] = deque(maxlen=20)  # the latest refusals' reasons
        self._pending: list[list] = []               # sent, not yet taken by every lane

    def submit(self, *args, **kwargs) -> None:
        """svc.send as this thread's client, now; confirmed by a later submit or by settle(). A
        refusal is kept, not raised."""
        try:
            self._pending.append(self.svc.send(*args, client=self.client, **kwargs))
        except ValueError as e:
            self._refuse(e)
        self.settle(wait=False)

    def settle(self, wait: bool = True) -> None:
        """Count what the lanes took or refused since; wait: until they have answered for all."""
        still = []
        for handles in self._pending:
            if not wait and not all(h.accepted.is_set() for h in handles):
                still.append(handles)
                continue
            try:
                self.svc.confirm(handles, CONFIRM_TIMEOUT_S)
                self.submitted += 1
            except (ValueError, TimeoutError) as e:
                self._refuse(e)
        self._pending = still

    def _refuse(self, e: Exception) -> None:
        self.errors.append(str(e))  # before the count: a reader that sees a refusal finds its reason
        self.refused += 1
        log.warning("%s: %s", self.name, e)

    def stop(self) -> None:
        self.halt.set()
