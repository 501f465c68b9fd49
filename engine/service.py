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

from .access import LOCAL, Access, Client
from .config import STRATEGIES, EngineConfig
from .event_hub import EventHub
from .events import StatusEvent
from .gpu_monitor import start_gpu_monitor
from .handles import RequestHandle
from .limits import ClientLimiter, ClientLimits
from .memory import GiB, check_kv_fits
from .request import SamplingParams
from .worker import EngineWorker

log = logging.getLogger(__name__)


class EngineService:
    def __init__(self, cfg: EngineConfig | None = None, strategies=("continuous", "static"),
                 hub_capacity: int = 2048, progress=None, access: Access | None = None,
                 limits: ClientLimits | None = None):
        """access: roles (default: from the environment, as on loopback); limits: what one viewer
        may submit in room mode (default: ClientLimits.from_env())."""
        self.cfg = cfg or EngineConfig()   # the settings the engines run (a failed configure leaves it)
        self._target_cfg = self.cfg        # what configure() asked for; equal to cfg once applied
        self._configuring: set[str] = set()
        self.access = access or Access.from_env()
        self.limiter = ClientLimiter(limits or ClientLimits.from_env())
        self.step_fault = None  # chaos testing: called before each step with the strategy; may raise
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
               strategies=None, tag: str = "api", timeout: float = 60.0,
               client: Client = LOCAL) -> list[RequestHandle]:
        """Queue one request on each strategy (default: all); returns one handle per strategy.

        Give `prompt` (text or token ids) or chat `messages`. Bad input raises ValueError
        (checked by the engines themselves, so the limits are exact) and nothing is queued.
        A viewer `client` is held to the room's limits (LimitExceeded, a ValueError)."""
        if (prompt is None) == (messages is None):
            raise ValueError("give exactly one of prompt or messages")
        _check_text(prompt, messages)
        params = params or SamplingParams()
        targets = self._targets(strategies)
        if not client.presenter:
            self.limiter.admit(client.key, params.max_tokens)
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
        if not client.presenter:
            self.limiter.track(client.key, handles)
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
        settings and then takes the requests that queued meanwhile: nothing is lost. `cfg` changes
        once every engine runs the new settings; if one fails to start with them, every engine
        keeps (or returns to) the old settings, and `cfg` never shows the failed ones."""
        if "strategy" in changes:
            raise ValueError("choose engines with strategies=[...], not strategy=")
        with self._lock:
            new_cfg = dataclasses.replace(self._target_cfg, **changes)  # validates, naming the bad field
            if new_cfg.kv_cache_memory_gb is not None:
                check_kv_fits(int(new_cfg.kv_cache_memory_gb * GiB), _device_of(new_cfg))
            wanted = self._check_strategies(strategies) if strategies is not None else self.strategies
            self._target_cfg = new_cfg
            for s, w in list(self.workers.items()):
                if s not in wanted:
                    w.stop(drain=True)
                    del self.workers[s]
                elif w.cfg != dataclasses.replace(new_cfg, strategy=s):
                    self._configuring.add(s)
                    w.reconfigure(dataclasses.replace(new_cfg, strategy=s))
            self._configuring &= set(wanted)
            for s in wanted:
                if s not in self.workers:
                    self._start_worker(s, new_cfg)
            if not self._configuring:
                self.cfg = new_cfg
        self._status("configured")
        return new_cfg

    def _restarted(self, worker: EngineWorker, error: Exception | None) -> None:
        """A worker finished a reconfigure (error: it kept its old engine). Called from its thread."""
        with self._lock:
            if error is not None:  # back to the settings every engine can run
                self._target_cfg = self.cfg
            target = dataclasses.replace(self._target_cfg, strategy=worker.strategy)
            if self.workers.get(worker.strategy) is worker and worker.cfg != target:
                worker.reconfigure(target)   # ran settings that were since withdrawn
                return
            self._configuring.discard(worker.strategy)
            if not self._configuring:
                self.cfg = self._target_cfg

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

    def engine_on(self, cfg: EngineConfig):
        """A running engine whose loaded weights an engine with cfg can share, or None."""
        for w in list(self.workers.values()):
            eng = w.engine
            if eng is not None and (eng.cfg.model, eng.cfg.device, eng.cfg.dtype) == (cfg.model, cfg.device, cfg.dtype):
                return eng
        return None

    @staticmethod
    def _check_strategies(strategies) -> list[str]:
        if isinstance(strategies, str):
            strategies = [strategies]
        out = list(dict.fromkeys(strategies or []))
        bad = [s for s in out if s not in STRATEGIES]
        if bad or not out:
            raise ValueError(f"strategies must be a non-empty list of {', '.join(STRATEGIES)}; got {strategies!r}")
        return out


def _device_of(cfg: EngineConfig):
    import torch
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


def _check_text(prompt, messages) -> None:
    """Text that cannot be encoded (a lone surrogate such as "\\ud800" from JSON) is refused here,
    before any tokenizer sees it."""
    texts = [prompt] if isinstance(prompt, str) else []
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict):
            texts += [v for v in (m.get("role"), m.get("content")) if isinstance(v, str)]
    for t in texts:
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"the prompt is not valid Unicode text: {e.reason} at character {e.start}") from None


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
