"""EngineService: one LLMEngine per strategy, each stepping in its own thread, one API for all callers.

The UI, the websocket and the OpenAI routes all go through this object. One
submission can go to several strategies at once; it gets the same request id
and the same arrival time on each, so the strategies see the same stream.
Everything the engines do is published to one EventHub.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from .config import STRATEGIES, EngineConfig
from .event_hub import EventHub
from .events import StatusEvent
from .gpu_monitor import start_gpu_monitor
from .handles import RequestHandle
from .request import SamplingParams
from .worker import EngineWorker

log = logging.getLogger(__name__)


class EngineService:
    def __init__(self, cfg: EngineConfig | None = None, strategies=("continuous", "static"),
                 hub_capacity: int = 2048, progress=None):
        self.cfg = cfg or EngineConfig()
        self.hub = EventHub(hub_capacity)
        self.progress = progress or self._publish_progress
        self._t0 = time.perf_counter()
        self._lock = threading.RLock()
        self._next_id = 0
        self.paused = threading.Event()
        self.min_interval_s = 0.0  # slow motion: each iteration lasts at least this long
        self.last_progress = ""    # latest model download / conversion message
        self.workers: dict[str, EngineWorker] = {}
        for s in self._check_strategies(strategies):
            self._start_worker(s, self.cfg)
        self.gpu_monitor = self._gpu_monitor()

    # ---- clock and lifecycle -----------------------------------------------------------------
    def clock(self) -> float:
        """Seconds since the service started: the time axis every engine and view shares."""
        return time.perf_counter() - self._t0

    def _start_worker(self, strategy: str, cfg: EngineConfig) -> None:
        # Engines on the same model share its weights: a later worker waits for the first to load.
        first = next(iter(self.workers.values()), None)
        w = EngineWorker(self, strategy, dataclasses.replace(cfg, strategy=strategy), first)
        self.workers[strategy] = w
        w.start()

    def _gpu_monitor(self):
        """NVML sampling when the engines run on an NVIDIA GPU (off the engine threads)."""
        import torch
        if self.cfg.device == "cpu" or not torch.cuda.is_available():
            return None
        index = int(self.cfg.device.split(":")[1]) if ":" in self.cfg.device else torch.cuda.current_device()
        return start_gpu_monitor(self.hub, self.clock, index)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every engine has loaded its model (raises the first load error)."""
        for w in list(self.workers.values()):
            w.wait_ready(timeout)

    def stop(self) -> None:
        if self.gpu_monitor is not None:
            self.gpu_monitor.stop()
        for w in list(self.workers.values()):
            w.stop()
        for w in list(self.workers.values()):
            w.join(timeout=10)

    @property
    def strategies(self) -> list[str]:
        return list(self.workers)

    # ---- commands ----------------------------------------------------------------------------
    def submit(self, prompt=None, params: SamplingParams | None = None, *, messages=None,
               strategies=None, tag: str = "api", timeout: float = 60.0) -> list[RequestHandle]:
        """Queue one request on each strategy (default: all); returns one handle per strategy.

        Give `prompt` (text or token ids) or chat `messages`. Bad input raises ValueError
        (checked by the engines themselves, so the limits are exact) and nothing is queued."""
        if (prompt is None) == (messages is None):
            raise ValueError("give exactly one of prompt or messages")
        params = params or SamplingParams()
        targets = self._targets(strategies)
        with self._lock:
            rid = self._next_id
            self._next_id += 1
        arrival = self.clock()
        handles = [RequestHandle(rid, s, tag) for s in targets]
        for h in handles:
            self.workers[h.strategy].add(h, prompt, messages, params, arrival)
        for h in handles:
            if not h.accepted.wait(timeout):
                self._abort_handles(handles)
                raise TimeoutError(f"engine '{h.strategy}' did not accept the request within {timeout:.0f} s")
        rejected = next((h for h in handles if h.rejection), None)
        if rejected is not None:
            self._abort_handles(handles)
            raise ValueError(rejected.rejection)
        return handles

    def _abort_handles(self, handles: list[RequestHandle]) -> None:
        for h in handles:
            self.workers[h.strategy].abort(h.request_id)

    def abort(self, request_id: int, strategies=None) -> None:
        for s in self._targets(strategies):
            self.workers[s].abort(request_id)

    def pause(self) -> None:
        self.paused.set()
        self._status("paused")

    def resume(self) -> None:
        self.paused.clear()
        for w in self.workers.values():
            w.wake()
        self._status("resumed")

    def step_once(self) -> None:
        """While paused: every engine runs exactly one iteration."""
        for w in self.workers.values():
            w.step_once()

    def set_slow_motion(self, min_interval_s: float) -> None:
        if not isinstance(min_interval_s, (int, float)) or not 0 <= min_interval_s <= 10:
            raise ValueError(f"slow motion interval must be between 0 and 10 seconds, got {min_interval_s!r}")
        self.min_interval_s = float(min_interval_s)
        self._status("slow_motion")

    def configure(self, strategies=None, **changes) -> EngineConfig:
        """Change engine settings (any EngineConfig field) and/or the set of strategies.

        Each engine stops admitting, finishes its in-flight requests, restarts with the new
        settings and then takes the requests that queued meanwhile: nothing is lost."""
        if "strategy" in changes:
            raise ValueError("choose engines with strategies=[...], not strategy=")
        new_cfg = dataclasses.replace(self.cfg, **changes)  # validates, naming the bad field
        with self._lock:
            wanted = self._check_strategies(strategies) if strategies is not None else self.strategies
            self.cfg = new_cfg
            for s, w in list(self.workers.items()):
                if s not in wanted:
                    w.stop(drain=True)
                    del self.workers[s]
                elif changes:
                    w.reconfigure(dataclasses.replace(new_cfg, strategy=s))
            for s in wanted:
                if s not in self.workers:
                    self._start_worker(s, new_cfg)
        self._status("configured")
        return new_cfg

    # ---- state ---------------------------------------------------------------------------------
    def status(self) -> dict:
        return {
            "type": "status",
            "t": self.clock(),
            "paused": self.paused.is_set(),
            "slow_motion_s": self.min_interval_s,
            "config": dataclasses.asdict(self.cfg),
            "engines": {s: w.status() for s, w in self.workers.items()},
        }

    def idle(self) -> bool:
        """No request in flight or queued on any engine."""
        return all(w.idle() for w in self.workers.values())

    def _publish_progress(self, message: str) -> None:
        """Model download / conversion progress, for pages waiting on a first start."""
        log.info("%s", message)
        self.last_progress = message
        self.hub.publish(StatusEvent(event="progress", message=message, t=self.clock()).hub_item())

    def _status(self, what: str) -> None:
        self.hub.publish(StatusEvent(event=what, t=self.clock()).hub_item())

    def _targets(self, strategies) -> list[str]:
        if strategies is None:
            return self.strategies
        targets = self._check_strategies(strategies)
        missing = [s for s in targets if s not in self.workers]
        if missing:
            raise ValueError(f"strategy {missing[0]!r} is not running; running: {', '.join(self.workers)}")
        return targets

    @staticmethod
    def _check_strategies(strategies) -> list[str]:
        if isinstance(strategies, str):
            strategies = [strategies]
        out = list(dict.fromkeys(strategies or []))
        bad = [s for s in out if s not in STRATEGIES]
        if bad or not out:
            raise ValueError(f"strategies must be a non-empty list of {', '.join(STRATEGIES)}; got {strategies!r}")
        return out


# ---- one service per process ---------------------------------------------------------------------
_REGISTRY_LOCK = threading.Lock()


def get_service(factory=None) -> EngineService:
    """The process-wide service, created on first use. Kept on the threading module so a
    Streamlit rerun or a module reload never starts a second set of engines."""
    with _REGISTRY_LOCK:
        svc = getattr(threading, "_inflight_service", None)
        if svc is None:
            svc = (factory or EngineService)()
            threading._inflight_service = svc
        return svc


def shutdown_service() -> None:
    with _REGISTRY_LOCK:
        svc = getattr(threading, "_inflight_service", None)
        if svc is not None:
            svc.stop()
            threading._inflight_service = None
