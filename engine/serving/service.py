"""EngineService: lanes (a name plus an EngineConfig), one LLMEngine each, stepping in its own
thread; one API for all callers. A lane may instead be a remote OpenAI-compatible server (a
RemoteConfig, served by a RemoteWorker: engine/serving/remote/lane.py).

The UI, the websocket and the OpenAI routes all go through this object. One submission can go to
several lanes at once; it gets the same request id and the same arrival time on each, so the lanes
see the same stream. Lanes on the same model, device and dtype share the loaded weights. Everything
the engines do is published to one EventHub.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time

from ..config import STRATEGIES, EngineConfig, resolve_device, same_weights
from ..device_memory import GiB, check_kv_fits, device_name
from ..event_hub import EventHub
from ..events import PAUSED, RESUMED, RUN_STARTED, LanesEvent, StatusEvent
from ..request import SamplingParams, check_priority_tenant
from ..room.access import LOCAL, Access, Client
from ..room.limits import ClientLimiter, ClientLimits
from ..room.participants import Participants, clean_name
from ..room.replays import ReplayBudget
from ..telemetry.gpu_monitor import start_gpu_monitor
from ..telemetry.prometheus import ServiceMetrics
from ..untrusted import shown
from .handles import RequestHandle
from .lane_host import LaneHost
from .lane_worker import LaneWorker
from .lanes import check_lane_name, lane_spec
from .remote.config import RemoteConfig
from .remote.lane import RemoteWorker
from .request_input import check_tag, checked_prompt
from .stamped_publish import StampedPublish
from .worker import EngineWorker, Submission

log = logging.getLogger(__name__)
LaneConfig = EngineConfig | RemoteConfig
# automatic slow motion: while at most this many requests run on a lane, each of its iterations lasts
# at least this long, so a presenter can talk over a handful of rows; a crowd runs at full speed
AUTO_SLOW_MAX_RUNNING = 4
AUTO_SLOW_INTERVAL_S = 0.4
# how long a settings change's caller (the socket's configure and lanes, the pages) waits for it to take or
# fail, so the answer names what failed; past it (lanes still drain their requests) it says "applying"
SETTLE_WAIT_S = 30.0
Lanes = dict[str, LaneConfig]


class EngineService:
    def __init__(self, cfg: EngineConfig | None = None, strategies=("continuous", "static"),
                 hub_capacity: int = 2048, progress=None, access: Access | None = None,
                 limits: ClientLimits | None = None, lanes: Lanes | None = None):
        """cfg: the base settings (model, device, ...) that lanes vary; lanes: name -> config (default:
        one lane per strategy in `strategies`, named after it). access: roles (default: from the
        environment); limits: what one viewer may submit in room mode."""
        self.cfg = cfg or EngineConfig()
        lanes = _check_lanes(lanes if lanes is not None else strategy_lanes(self.cfg, strategies), self.cfg)
        self._committed: tuple[EngineConfig, Lanes] = (self.cfg, lanes)  # what every engine runs
        self._target: tuple[EngineConfig, Lanes] = self._committed       # what was last asked for
        self._configuring: set[str] = set()
        self.access = access or Access.from_env()
        self.limiter = ClientLimiter(limits or ClientLimits.from_env())
        self.replays = ReplayBudget()  # what a viewer may have the socket send again (engine/room/replays.py)
        self.participants = Participants()  # who joined through /join
        self.step_fault = None  # chaos testing: called before each step with the lane; may raise
        self.hub = EventHub(hub_capacity)
        self.metrics = ServiceMetrics(self._lane_states, self._model_of, self._slo_of)  # GET /metrics
        self.hub.add_listener(self.metrics.observe)
        self.progress = progress or self._publish_progress
        self._t0 = time.perf_counter()
        self._lock = threading.RLock()
        self._settled = threading.Condition(self._lock)  # notified when a change took or was rolled back
        self._changes = 0  # settings changes applied so far
        self._failure: tuple[int, str] | None = None  # (change, why) of the last change rolled back
        self._next_id = 0
        self.paused = threading.Event()
        self.min_interval_s = 0.0  # slow motion: each iteration lasts at least this long
        self.auto_slow_motion = False  # slow down while only a few requests run (pace_s)
        self.last_progress = ""    # latest model download / conversion message
        self.recorder = None  # engine/workshop/recording: the Recorder writing this service's events, if any
        self.replay = None    # engine/workshop/recording: a Replayer the live views show instead of the engines
        self.replay_error = None  # why the last replay stopped before its end (a chunk off the contract), if it did
        self.host = LaneHost(clock=self.clock, publish=StampedPublish(self.hub.publish),
                             progress=lambda m: self.progress(m), paused=self.paused.is_set, pace_s=self.pace_s,
                             before_step=self._before_step, engine_on=self.engine_on, kv_lanes=self.kv_lanes,
                             restarted=self._restarted)  # all a worker may use
        self.workers: dict[str, LaneWorker] = {}  # replaced whole, never changed in place
        with self._lock:  # a lane that fails at once waits for the others to be here (_restarted)
            for name, lane_cfg in lanes.items():
                self.workers = {**self.workers, name: self._new_worker(name, lane_cfg)}
        self.gpu_monitor = self._gpu_monitor()

    # ---- clock and lifecycle -----------------------------------------------------------------
    def clock(self) -> float:
        """Seconds since the service started: the time axis every engine and view shares."""
        return time.perf_counter() - self._t0

    def _new_worker(self, lane: str, cfg: LaneConfig, after: tuple[EngineWorker, ...] = ()) -> LaneWorker:
        if cfg.is_remote:
            w = RemoteWorker(self.host, lane, cfg)
            w.start()
            return w
        # A lane whose weights match another's (runner.weights_key) shares them (waiting for them
        # if that lane is still loading): one copy in memory, and no two loads at once.
        share = self.engine_on(cfg)
        loading = None if share is not None else next(
            (w for w in self.workers.values() if isinstance(w.cfg, EngineConfig) and same_weights(w.cfg, cfg)), None)
        w = EngineWorker(self.host, lane, cfg, share=share, weights_from=loading, after=after)
        w.start()
        return w

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
        for player in (self.replay, self.recorder):  # a recording in progress keeps what was written
            if player is not None:
                player.stop()
        if self.gpu_monitor is not None:
            self.gpu_monitor.stop()
        for w in list(self.workers.values()):
            w.stop()
        for w in list(self.workers.values()):
            w.join(timeout=10)

    @property
    def lanes(self) -> Lanes:
        """Lane name -> the settings it runs, in display order."""
        return {name: w.cfg for name, w in self.workers.items()}

    @property
    def lane_names(self) -> list[str]:
        return list(self.workers)

    @property
    def wanted_lanes(self) -> Lanes:
        """The lanes last asked for: what `lanes` becomes once the change has taken (a changed lane runs
        its old settings until its requests drain); after a change that failed, what runs again."""
        with self._lock:
            return dict(self._target[1])


    # ---- commands ----------------------------------------------------------------------------
    def submit(self, prompt=None, params: SamplingParams | None = None, *, messages=None,
               lanes=None, tag: str = "api", timeout: float = 60.0,
               client: Client = LOCAL, priority: int = 0, tenant: str | None = None,
               name: str | None = None) -> list[RequestHandle]:
        """Queue one request on each lane (default: all) and wait until each lane took it; returns one
        handle per lane. send() and confirm() are its two steps, for a caller that keeps a schedule.

        Give `prompt` (text or token ids) or chat `messages`. Bad input raises ValueError
        (checked by the engines themselves, so the limits are exact) and nothing is queued.
        A viewer `client` is held to the room's limits (LimitExceeded, a ValueError); it may not
        jump the queue (a priority below 0 is refused: NotPresenter), and its tenant is its client
        key's label (Access.tenant_of: no address or phone id) whatever it names, so it can neither
        pose as another tenant nor split itself into many.
        `name`: the participant's display name (plain text, see engine/room/participants.py); a named
        request counts toward the room's participants once the lanes took it."""
        handles = self.send(prompt, params, messages=messages, lanes=lanes, tag=tag, client=client,
                            priority=priority, tenant=tenant, name=name)
        self.confirm(handles, timeout)
        if name is not None:
            self.participants.count(client.key, clean_name(name), self.clock())
        return handles

    def send(self, prompt=None, params: SamplingParams | None = None, *, messages=None, lanes=None,
             tag: str = "api", client: Client = LOCAL, priority: int = 0,
             tenant: str | None = None, name: str | None = None) -> list[RequestHandle]:
        """submit's first step: check what can be checked here (ValueError), then queue the request on
        each lane and return at once, its arrival stamped now, whatever step the lanes are in. The
        lanes check the rest as they take it: confirm(handles) says whether they did."""
        prompt, messages = checked_prompt(prompt, messages)
        params, tenant = self._checked(params, tag, client, priority, tenant)
        name = None if name is None else clean_name(name)
        workers, rid, reservation = self._admit(lanes, client, params)
        sub = Submission(prompt, messages, params, self.clock(), priority, tenant, name)
        handles = [RequestHandle(rid, w.lane, tag) for w in workers]
        for w, h in zip(workers, handles):
            w.add(h, sub)
        if reservation is not None:
            reservation.hold(handles)  # counts as in flight until every copy has finished
        return handles

    def _checked(self, params, tag: str, client: Client, priority: int, tenant: str | None):
        """(params, tenant) as the lanes get them: a viewer may not jump the queue, and its tenant is its
        client key's label whatever it named."""
        check_tag(tag)
        check_priority_tenant(priority, tenant)
        if priority < 0:
            self.access.require_presenter(client, "a priority better than 0")
        if not client.presenter:
            tenant = self.access.tenant_of(client.key)
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        params.validate()
        return params, tenant

    def _admit(self, lanes, client: Client, params: SamplingParams):
        """(the lanes' workers, the request's id, a viewer's reservation under the room's limits or None)."""
        with self._lock:
            workers = [self.workers[name] for name in self._running(lanes)]
            reservation = None if client.presenter else self.limiter.admit(client.key, params.max_tokens,
                                                                           client.outer)
            rid = self._next_id
            self._next_id += 1
        return workers, rid, reservation

    def confirm(self, handles: list[RequestHandle], timeout: float = 60.0) -> None:
        """submit's second step: wait until every lane took its copy. If one refused it (ValueError, its
        reason) or did not take it within `timeout` s (TimeoutError), every copy is aborted."""
        deadline = time.monotonic() + timeout
        for h in handles:
            if not h.accepted.wait(max(0.0, deadline - time.monotonic())):
                self._abort_handles(handles)
                raise TimeoutError(f"lane {h.lane!r} did not accept the request within {timeout:.0f} s")
        rejected = next((h for h in handles if h.rejection), None)
        if rejected is not None:
            self._abort_handles(handles)
            raise ValueError(rejected.rejection)

    def _abort_handles(self, handles: list[RequestHandle]) -> None:
        for h in handles:
            worker = self.workers.get(h.lane)
            if worker is not None:
                worker.abort(h.request_id)

    def abort(self, request_id: int, lanes=None) -> None:
        with self._lock:  # the lanes named now (a lane removed later drains its requests itself)
            workers = [self.workers[name] for name in self._running(lanes)]
        for w in workers:
            w.abort(request_id)

    def pause(self) -> None:
        self.paused.set()
        self._status(PAUSED)

    def resume(self) -> None:
        self.paused.clear()
        for w in list(self.workers.values()):
            w.wake()
        self._status(RESUMED)

    def start_run(self, title: str) -> None:
        """A run begins now (a scenario's request stream): the metric cards describe it alone."""
        self.hub.publish(StatusEvent(event=RUN_STARTED, t=self.clock(), message=title))

    def step_once(self) -> None:
        """While paused: every engine runs exactly one iteration."""
        for w in list(self.workers.values()):
            w.step_once()

    def launch_batch(self, lanes=None) -> list[str]:
        """Static and dynamic lanes (of those named; default: all) launch what waits at their next step,
        as a batch however full (the presenter's button); returns the lanes asked."""
        with self._lock:
            workers = [self.workers[n] for n in self._running(lanes)]
        batching = [w for w in workers if isinstance(w.cfg, EngineConfig) and w.cfg.strategy != "continuous"]
        for w in batching:
            w.launch_batch()
        return [w.lane for w in batching]

    def set_slow_motion(self, min_interval_s: float) -> None:
        if not isinstance(min_interval_s, (int, float)) or not 0 <= min_interval_s <= 10:
            raise ValueError(f"slow motion interval must be between 0 and 10 seconds, got {min_interval_s!r}")
        self.min_interval_s = float(min_interval_s)
        self._status("slow_motion")

    def set_auto_slow_motion(self, on: bool) -> None:
        self.auto_slow_motion = bool(on)
        self._status("slow_motion")

    def pace_s(self, num_running: int) -> float:
        """How long an iteration that ran `num_running` requests lasts at least (slow motion)."""
        auto = self.auto_slow_motion and 0 < num_running <= AUTO_SLOW_MAX_RUNNING
        return max(self.min_interval_s, AUTO_SLOW_INTERVAL_S if auto else 0.0)

    # ---- settings and lanes --------------------------------------------------------------------
    def configure(self, lanes=None, wait_s: float = 0.0, **changes) -> bool:
        """Change settings (any EngineConfig field but strategy) on the given lanes (default: all
        local lanes and the base config new lanes start from; a remote lane's settings are its
        server's). If a lane cannot start with them, every lane goes back to what ran before.
        wait_s, and what it returns: see settle()."""
        if "strategy" in changes:
            raise ValueError("a lane's strategy is part of the lane: change it with set_lanes")
        with self._lock:
            base, target = self._target
            names = set(self.lane_names if lanes is None else self._running(lanes))  # a failed lane too
            remote = [n for n in names if target[n].is_remote]
            if lanes is not None and remote:
                raise ValueError(f"lane {remote[0]!r} is a remote server: its settings are the server's")
            names -= set(remote)
            new_base = dataclasses.replace(base, **changes) if lanes is None else base
            new_lanes = {n: dataclasses.replace(c, **changes) if n in names else c for n, c in target.items()}
            change = self._apply(new_base, new_lanes)
        self._status("configured")
        return self.settle(change, wait_s)

    def set_lanes(self, lanes: dict, wait_s: float = 0.0) -> bool:
        """Run exactly these lanes (name -> an EngineConfig, or a dict of the fields that differ from
        the base config; or a RemoteConfig, or a dict with a "remote" URL), in display order: new ones
        start, changed ones drain and restart, removed ones drain and stop. Requests in flight always
        finish. If a lane cannot start, every lane goes back to what ran before. wait_s: see settle()."""
        with self._lock:
            base = self._target[0]
            change = self._apply(base, _check_lanes(lanes, base))
        self._publish_lanes()
        return self.settle(change, wait_s)

    def settle(self, change: int, wait_s: float) -> bool:
        """Wait up to wait_s for settings change `change` to take (True) or to fail (ValueError, saying
        which lane and field, once every lane is back on what ran before); False: still applying (lanes
        drain their requests in flight first)."""
        with self._settled:
            done = self._settled.wait_for(lambda: not self._configuring or self._changes != change, wait_s)
            if self._failure is not None and self._failure[0] == change:
                raise ValueError(self._failure[1])
            return done and self._changes == change

    def _publish_lanes(self) -> None:
        lanes = self._target[1]
        self.hub.publish(LanesEvent(lanes={n: lane_dict(c) for n, c in lanes.items()}))

    def _apply(self, base: EngineConfig, lanes: Lanes) -> int:
        """Each engine stops admitting, finishes its in-flight requests, restarts with the new
        settings and then takes the requests that queued meanwhile: nothing is lost. The committed
        settings change once every engine runs the new ones; if one fails to start with them,
        every engine keeps (or returns to) the committed ones, which never show the failed ones."""
        for name, c in lanes.items():  # each pool that will be built must fit what is free now (and its
            w = self.workers.get(name)   # lane's old pool, given back first)
            if getattr(c, "kv_cache_memory_gb", None) is not None and (w is None or w.cfg != c):
                check_kv_fits(int(c.kv_cache_memory_gb * GiB), resolve_device(c.device), reclaimed=_pool_bytes(w, c))
        self._target = (base, lanes)
        self._changes += 1
        workers = dict(self.workers)
        leaving = tuple(w for name, w in workers.items() if name not in lanes and isinstance(w, EngineWorker))
        for name, c in lanes.items():  # new lanes first: they may share the weights of lanes going away
            if name not in workers:  # (sized once those have let go of their KV)
                workers[name] = self._new_worker(name, c, after=leaving)
                if not c.is_remote:  # settled once it has loaded (_restarted)
                    self._configuring.add(name)
        for name, w in list(workers.items()):
            if name not in lanes:  # off the screen: its requests end now, said why, and it stops computing
                w.stop(reason=f"lane '{name}' was removed")
                self._configuring.discard(name)
            else:
                workers[name] = self._change(w, lanes[name])
        self.workers = {name: workers[name] for name in lanes}  # display order; one assignment
        if not self._configuring:
            self._commit()
        return self._changes

    def _change(self, w, cfg: LaneConfig):
        """The worker that runs cfg in w's lane: w itself (reconfigured if need be), or, when w or cfg
        is remote, a new worker while w drains and stops."""
        if w.cfg == cfg:
            return w
        if isinstance(w, EngineWorker) and isinstance(cfg, EngineConfig):
            self._configuring.add(w.lane)
            w.reconfigure(cfg)
            return w
        w.stop(drain=True)
        self._configuring.discard(w.lane)
        new = self._new_worker(w.lane, cfg)
        if not cfg.is_remote:  # settled once it has loaded
            self._configuring.add(w.lane)
        return new

    def _commit(self) -> None:
        self._committed = self._target
        self.cfg = self._target[0]
        self._settled.notify_all()

    def _before_step(self, lane: str) -> None:
        if self.step_fault is not None:
            self.step_fault(lane)

    def _restarted(self, worker: EngineWorker, tried: EngineConfig, error: Exception | None) -> None:
        """A worker loaded its first engine or finished a reconfigure to `tried` (error: it has no engine,
        or kept its old one). Called from its thread. Only a failure of the settings the last change asked
        for rolls the lanes back; one of settings since withdrawn, or of those that ran before (nothing to
        go back to), leaves that lane as it is."""
        with self._lock:
            if self.workers.get(worker.lane) is not worker:
                return  # a lane removed or replaced meanwhile: nothing to keep in step
            want = self._target[1].get(worker.lane)
            if error is not None and tried == want and want != self._committed[1].get(worker.lane):
                self._failure = (self._changes, f"lane '{worker.lane}' could not start: {error}")
                self._roll_back()  # (which asks this worker for what it ran before, if it must)
                if self.workers.get(worker.lane) is worker and worker.cfg == self._target[1].get(worker.lane):
                    self._configuring.discard(worker.lane)  # it kept what ran before
            elif want is not None and worker.cfg != want and tried != want:
                worker.reconfigure(want)  # ran settings that were since withdrawn
                return
            else:
                self._configuring.discard(worker.lane)
            if not self._configuring:
                self._commit()
        if error is not None:
            self._publish_lanes()

    def _roll_back(self) -> None:
        """A lane could not start with the new settings: every lane goes back to what ran before (the
        settings, and the set of lanes: a new lane stops, a removed one starts again), and the base
        config to the committed one."""
        base, old = self._committed
        self._target = (base, old)
        workers = dict(self.workers)
        for name, w in workers.items():
            if name not in old:
                w.stop(reason=f"lane '{name}' could not start")
                self._configuring.discard(name)
        for name, c in old.items():
            if name not in workers:
                workers[name] = self._new_worker(name, c)
                if not c.is_remote:
                    self._configuring.add(name)
            else:
                workers[name] = self._change(workers[name], c)
        self.workers = {name: workers[name] for name in old}
        self._settled.notify_all()

    # ---- state ---------------------------------------------------------------------------------
    def status(self) -> dict:
        return {
            "type": StatusEvent.TYPE,
            "t": self.clock(),
            "paused": self.paused.is_set(),
            "slow_motion_s": self.min_interval_s,
            "auto_slow_motion": self.auto_slow_motion,
            "room": self.participants.summary(),
            "config": dataclasses.asdict(self.cfg),
            "engines": {name: {**w.status(), "config": lane_dict(w.cfg)}
                        for name, w in list(self.workers.items())},
        }

    def _lane_states(self) -> dict[str, tuple[str, dict]]:
        return {name: (w.cfg.model, w.status()) for name, w in list(self.workers.items())}

    def _model_of(self, lane: str) -> str:
        w = self.workers.get(lane)
        return w.cfg.model if w is not None else ""

    def _slo_of(self, lane: str) -> tuple[float | None, float | None]:
        w = self.workers.get(lane)
        return (w.cfg.slo_ttft_s, w.cfg.slo_tpot_s) if w is not None and not w.cfg.is_remote else (None, None)

    def idle(self) -> bool:
        """No request in flight or queued on any engine."""
        return all(w.idle() for w in list(self.workers.values()))

    def _publish_progress(self, message: str) -> None:
        """Model download / conversion progress, for pages waiting on a first start."""
        log.info("%s", message)
        self.last_progress = message
        self.hub.publish(StatusEvent(event="progress", message=message, t=self.clock()))

    def _status(self, what: str) -> None:
        self.hub.publish(StatusEvent(event=what, t=self.clock()))

    def _running(self, lanes) -> list[str]:
        """The named lanes (default: all that run or are starting; a lane that could not start is
        left out), each checked to be running."""
        if lanes is None:
            names = [n for n, w in list(self.workers.items()) if w.load_error is None or w.engine is not None]
            if not names:
                raise ValueError("lanes: no lane is running (each one could not start; the status says why)")
            return names
        if isinstance(lanes, str):
            lanes = [lanes]
        if not isinstance(lanes, (list, tuple)) or not all(isinstance(n, str) for n in lanes):
            raise ValueError(f"lanes must be a non-empty list of lane names; got {shown(lanes)}")
        names = list(dict.fromkeys(lanes))
        if not names:
            raise ValueError(f"lanes must be a non-empty list of lane names; got {shown(lanes)}")
        missing = [n for n in names if n not in self.workers]
        if missing:
            raise ValueError(f"lanes: lane {shown(missing[0])} is not running; running: {', '.join(self.workers)}")
        return names

    def engine_on(self, cfg: EngineConfig):
        """A running engine whose loaded weights an engine with cfg can share, or None."""
        for w in list(self.workers.values()):
            eng = w.engine
            if eng is not None and same_weights(eng.cfg, cfg):
                return eng
        return None

    def kv_lanes(self, cfg: EngineConfig) -> int:
        """How many of the lanes last asked for hold KV pools on cfg's device, cfg's lane among them: on a GPU
        they take equal parts of its memory (kv/sizing.py)."""
        device = _device_of(cfg)
        return max(1, sum(1 for c in self._target[1].values() if not c.is_remote and _device_of(c) == device))


def _pool_bytes(w, cfg: EngineConfig) -> int:
    """The KV pools a lane's running engine holds on cfg's device (0 for none, or for a remote lane)."""
    engine = getattr(w, "engine", None)
    if engine is None or _device_of(engine.cfg) != _device_of(cfg):
        return 0
    return engine.kv_pool_bytes


def _device_of(cfg: EngineConfig) -> str | None:
    """The device a config's engine runs on, by name (device_name), or None where it cannot run here."""
    try:
        return device_name(resolve_device(cfg.device))
    except (ValueError, RuntimeError):  # (torch.device's own refusal is a RuntimeError)
        return None


def lane_dict(cfg: LaneConfig) -> dict:
    """A lane's settings as status and the `lanes` event show them (a remote lane's without its key)."""
    return cfg.to_dict() if cfg.is_remote else dataclasses.asdict(cfg)


def strategy_lanes(base: EngineConfig, strategies) -> Lanes:
    """One lane per strategy, named after it."""
    if isinstance(strategies, str):
        strategies = [strategies]
    names = list(dict.fromkeys(strategies or []))
    bad = [s for s in names if s not in STRATEGIES]
    if bad or not names:
        raise ValueError(f"strategies must be a non-empty list of {', '.join(STRATEGIES)}; got {strategies!r}")
    return {s: dataclasses.replace(base, strategy=s) for s in names}


def _check_lanes(lanes, base: EngineConfig) -> Lanes:
    """name -> EngineConfig or RemoteConfig, each name checked; a dict value is the fields that differ
    from base, or a remote lane's spec ({"remote": url, "model": ...})."""
    if not isinstance(lanes, dict) or not lanes:
        raise ValueError(f"lanes must be a non-empty mapping of lane name -> EngineConfig, got {lanes!r}")
    out = {}
    for name, cfg in lanes.items():
        check_lane_name(name)
        if isinstance(cfg, dict):
            cfg = lane_spec(base, cfg)
        if not isinstance(cfg, (EngineConfig, RemoteConfig)):
            raise ValueError(f"lane {name!r}: expected an EngineConfig, a RemoteConfig or a dict of fields, "
                             f"got {type(cfg).__name__}")
        out[name] = cfg
    return out
