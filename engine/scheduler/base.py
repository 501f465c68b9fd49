"""The scheduler interface shared by every strategy: schedule() -> SchedulerOutput."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from ..config import EngineConfig
from ..events import DECODE, PREFILL
from ..kv import KVCacheManager
from ..request import Request, RequestStatus


@dataclass
class ScheduledRow:
    """One request's share of an iteration.

    num_new real tokens are computed from request.num_computed_tokens on; num_pad
    pad tokens are computed and thrown away (static batching: left padding of a
    prompt, or one token for a row that already finished but still holds its slot).
    """
    request: Request
    phase: str            # one of engine.events.PHASES
    num_new: int
    num_pad: int = 0
    slot: int = -1

    @property
    def samples(self) -> bool:
        r = self.request
        return self.num_new > 0 and r.num_computed_tokens + self.num_new == r.num_tokens


@dataclass
class SchedulerOutput:
    rows: list[ScheduledRow] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(r.num_new + r.num_pad for r in self.rows)


class Scheduler(ABC):
    """Owns the waiting queue and the running set; the engine owns the requests' lifecycle."""

    def __init__(self, cfg: EngineConfig, cache: KVCacheManager, clock):
        self.cfg, self.cache, self.clock = cfg, cache, clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        # generate() sets this when no more requests will come: launch partial static batches.
        self.draining = False

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @abstractmethod
    def schedule(self) -> SchedulerOutput: ...

    @abstractmethod
    def on_finished(self, request: Request) -> None:
        """A request just finished (stop, length, abort or error)."""

    def on_step_done(self) -> None:
        """Called after every step's update."""

    def remove_waiting(self, request: Request) -> bool:
        try:
            self.waiting.remove(request)
            return True
        except ValueError:
            return False

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @staticmethod
    def phase_of(request: Request, num_new: int) -> str:
        decoding = request.output_token_ids and request.num_computed_tokens == request.num_tokens - 1
        return DECODE if decoding and num_new == 1 else PREFILL

    def _start(self, request: Request) -> None:
        request.status = RequestStatus.RUNNING
