"""EngineWorker: the thread that owns one lane's LLMEngine and steps it.

Only this thread changes its engine: other threads talk to it through a command queue of closures, run
between iterations (they may read its counters and the engine it shares weights from, never step it).
It reaches the service only through its LaneHost.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections import Counter
from dataclasses import dataclass

from ..config import EngineConfig, dtype_choice, dtype_name, same_weights
from ..cpu_share import CORES
from ..device_memory import CUDA_CAPTURE_LOCK, frames_cleared, freeze_loaded_engine, release_freed_memory
from ..disaggregated import build_engine
from ..events import FinishedEvent, RequestEvent, StatusEvent, StepMessage, WaitsEvent
from ..llm_engine import LLMEngine
from ..request import RequestOutput, SamplingParams
from ..telemetry.roofline import EngineRoofline, engine_roofline
from .handles import RequestHandle
from .lane_host import LaneHost

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.5      # nothing to do: wake up at least this often
POLL_WAIT_S = 0.01     # waiting requests but nothing schedulable (a static batch filling up)
AFTER_WAIT_S = 30.0    # a new lane waits at most this long for the lanes it replaces to let go of their KV
_BUILD_LOCK = threading.Lock()


@dataclass(frozen=True)
class Submission:
    """One request as the service hands it to each lane."""
    prompt: object            # text or token ids; None when given as chat messages
    messages: list | None
    params: SamplingParams
    arrival_s: float
    priority: int = 0
    tenant: str | None = None
    name: str | None = None   # the participant's display name (/join)


def _hold_back(params) -> int:
    """Characters to keep back from the stream: they could still begin a stop string."""
    return max((len(s) for s in params.stop_strings()), default=1) - 1


class EngineWorker(threading.Thread):
    def __init__(self, host: LaneHost, lane: str, cfg: EngineConfig, share: LLMEngine | None = None,
                 weights_from: EngineWorker | None = None, after: tuple[EngineWorker, ...] = ()):
        """share: an engine whose loaded weights this one reuses; weights_from: a worker still loading
        them, whose engine's weights this one reuses once it has loaded; after: stopping workers whose KV
        pools go before this one's is sized (lanes it replaces on the screen)."""
        super().__init__(daemon=True, name=f"inflight-{lane}")
        self.host, self.lane, self.cfg = host, lane, cfg
        self._weights_from, self._after = weights_from, after
        self.kv_released = threading.Event()  # set once this lane has stopped and let go of its KV pools
        self._share: LLMEngine | None = share
        self.engine: LLMEngine | None = None
        self.handles: dict[int, RequestHandle] = {}
        self._cmds: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._ready = threading.Event()
        self.load_error: Exception | None = None
        self._drain_then_stop = False
        self._stop_reason = "the service stopped"
        self._pending_cfg: EngineConfig | None = None
        self._deferred: list[tuple[RequestHandle, Submission]] = []  # arrived while reconfiguring
        self._step_credits = 0             # single steps granted while paused
        self.last_step_ms = 0.0
        self.steps = 0
        self.roofline: EngineRoofline | None = None  # the engine's model costs and device peaks
        self.warming: dict | None = None  # while the engine warms up: {"done", "total", "what"}

    # ---- called from other threads -----------------------------------------------------------
    def add(self, handle: RequestHandle, sub: Submission) -> None:
        if self._drain_then_stop or self._halt.is_set():  # its thread may never read the queue again
            handle.reject(f"lane '{self.lane}' was removed")
            return
        self._call(lambda: self._add(handle, sub))

    def abort(self, request_id: int) -> None:
        self._call(lambda: self._abort(request_id))

    def step_once(self) -> None:
        self._call(self._grant_step)

    def launch_batch(self) -> None:
        """Static/dynamic: launch what waits at the next step, full batch or not."""
        self._call(self._launch_batch)

    def reconfigure(self, cfg: EngineConfig) -> None:
        self._call(lambda: self._start_reconfigure(cfg))

    def stop(self, drain: bool = False, reason: str = "the service stopped") -> None:
        """drain: finish the requests in flight first; else abort them now, saying `reason`."""
        if drain:
            self._drain_then_stop = True  # new submissions are refused from now on
            self._call(self._start_drain_stop)
        else:
            self._stop_reason = reason
            self._halt.set()
            self.wake()

    def wake(self) -> None:
        self._wake.set()

    def wait_ready(self, timeout: float | None = None) -> None:
        if not self._ready.wait(timeout):
            raise TimeoutError(f"lane '{self.lane}' still loading after {timeout} s")
        if self.load_error is not None:
            raise self.load_error

    def idle(self) -> bool:
        return not self.handles and not self._deferred and self._cmds.empty()

    def status(self) -> dict:
        eng = self.engine
        return {
            "ready": self._ready.is_set() and self.load_error is None,
            "error": None if self.load_error is None else str(self.load_error),
            "reconfiguring": self._pending_cfg is not None,
            "in_flight": len(self.handles),
            "steps": self.steps,
            "last_step_ms": self.last_step_ms,
            "kv_blocks": None if eng is None else eng.kv_blocks[1],
            "kv_used_blocks": None if eng is None else eng.kv_blocks[0],
            "num_running": 0 if eng is None else eng.num_running,
            "num_waiting": 0 if eng is None else eng.num_waiting,
            # why they wait, as the last step decided (engine/scheduler/waits.py): reason -> requests
            "waiting_by_reason": {} if eng is None else dict(Counter(w["why"] for w in list(eng.waits.values()))),
            "max_model_len": None if eng is None else eng.max_model_len,
            "device": None if eng is None else str(eng.runner.device),
            "dtype": None if eng is None else dtype_name(eng.runner.dtype),
            "dtype_why": None if eng is None else dtype_choice(eng.cfg.dtype, eng.runner.device)[1],
            "attention": None if eng is None else eng.runner.backend,
            "attention_why": None if eng is None else eng.runner.backend_why,
            "cuda_graphs": None if eng is None else eng.runner.graphs_state(),
            "warming_up": self.warming,
            "warmup": None if eng is None or eng.warmup is None else eng.warmup.as_dict(),
            "kernel_compiles": 0 if eng is None else eng.kernel_compiles,  # since its warm-up: 0 is warm
        }

    def _rest(self) -> None:
        """Nothing computes now: the lane's share of the cores goes back (a disaggregated lane's halves too)."""
        CORES.resting(self)
        if self.engine is not None:
            self.engine.rest()

    def _call(self, fn) -> None:
        self._cmds.put(fn)
        self.wake()

    # ---- the thread --------------------------------------------------------------------------
    def run(self) -> None:
        CORES.lane_thread()
        try:
            self._serve()
        finally:
            CORES.resting(self)  # even if the thread dies: its share and its helper go with it
            self.kv_released.set()

    def _serve(self) -> None:
        for w in self._after:  # (they end their requests at once: a step's time at most)
            w.kv_released.wait(AFTER_WAIT_S)
        self._after = ()
        try:
            if self._share is None and self._weights_from is not None:
                self._weights_from._ready.wait()
                self._share = self._weights_from.engine
                self._weights_from = None
            self.engine = self._build(self.cfg)
            freeze_loaded_engine()  # the engine lives as long as the lane: full collections skip it
        except Exception as e:  # noqa: BLE001 - reported to every caller instead
            log.exception("engine %s failed to load", self.lane)
            self.load_error = e
        finally:
            self._share = None  # the weights live on in our engine; do not pin the other engine
            self._ready.set()
        self._publish(StatusEvent(event="ready" if self.load_error is None else "load_error",
                                  error=None if self.load_error is None else str(self.load_error)))
        self.host.restarted(self, self.cfg, self.load_error)
        while not self._halt.is_set():
            self._run_commands()
            if self.engine is None:  # failed to load: only a reconfigure or a stop can help
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            if self._maybe_finish_drain():
                continue
            if self._should_step():
                self._step()
            else:
                self._rest()
                self._wake.wait(POLL_WAIT_S if self.engine.has_unfinished() else IDLE_WAIT_S)
                self._wake.clear()
        self._run_commands()
        self._abort_all(self._stop_reason)
        dropped = None
        if self.engine is not None:
            _release_kv(self.engine)  # (a lane that shares its weights may hold the engine: not its pools)
            dropped = weakref.ref(self.engine)
        self.engine = None  # a stopped lane's memory (KV pool, weights if unshared) goes now
        release_freed_memory(dropped)
        self.kv_released.set()

    def _engine_for(self, cfg: EngineConfig) -> LLMEngine:
        """A new engine for cfg, sharing the weights of a running engine that has them (this lane's old one
        among them)."""
        self._share = self.host.engine_on(cfg)
        try:
            return self._build(cfg)
        finally:
            self._share = None  # (the old engine's weights go with it, unless the new one shares them)

    def _let_go_of_old(self, cfg: EngineConfig) -> None:
        """The old engine (drained: nothing runs on it) gives its KV pools back before the new one is sized:
        one pool per lane at any time, so on a GPU a lane's share is the same after (kv/sizing.py). Its weights
        stay for the new engine to share; where they cannot serve it, they go too (the lane shows no engine
        while the new one loads)."""
        old = self.engine
        if old is None:
            return
        pools = _release_kv(old)
        if not same_weights(old.cfg, cfg):
            self.engine = None
        del old
        release_freed_memory(lambda: next((p() for p in pools if p() is not None), None))

    def _engine_again(self) -> LLMEngine | None:
        """The old settings' engine built again after a reconfigure failed (None where that fails too: the
        lane then says why, as one that failed to load)."""
        try:
            return self._engine_for(self.cfg)
        except Exception as e:  # noqa: BLE001 - reported like a failed load
            log.exception("engine %s: the old config failed to load again", self.lane)
            self.load_error = frames_cleared(e)
            return None

    def _build(self, cfg: EngineConfig) -> LLMEngine:
        with _BUILD_LOCK:  # model loading is not thread-safe (transformers initialises on the meta device)
            try:
                engine = build_engine(cfg, progress=self.host.progress, clock=self.host.clock,
                                      share_weights_with=self._share, on_warmup=self._warming,
                                      kv_lanes=self.host.kv_lanes(cfg))
            finally:
                self.warming = None  # done, or failed part way
            self.roofline = engine_roofline(engine)  # under the lock: no other load disturbs a first measurement
        CORES.resting(self)  # a new engine computes nothing yet (and one on a GPU never takes CPU cores)
        return engine

    def _warming(self, done: int, total: int, what: str) -> None:
        """The engine's warm-up goes on (engine/model/warmup.py): the status says so until it is done."""
        self.warming = None if done >= total else {"done": done, "total": total, "what": what}
        if self.warming:
            self.host.progress(f"Warming up lane '{self.lane}': {what} ({done + 1} of {total})")

    def _run_commands(self) -> None:
        while True:
            try:
                fn = self._cmds.get_nowait()
            except queue.Empty:
                return
            try:
                fn()
            except Exception:  # noqa: BLE001 - a bad command must not kill the engine thread
                log.exception("engine %s: command failed", self.lane)

    def _should_step(self) -> bool:
        if not self.engine.has_unfinished():
            return False
        return not self.host.paused() or self._step_credits > 0

    def _grant_step(self) -> None:
        self._step_credits += 1

    def _launch_batch(self) -> None:
        if self.engine is not None and self.engine.launch_batch():
            self._publish(StatusEvent(event="batch_launched", t=self.host.clock()))

    def _step(self) -> None:
        t0 = time.perf_counter()
        if self._step_credits:
            self._step_credits -= 1
        try:
            self.host.before_step(self.lane)  # chaos testing only (tests, engine.harness.soak)
            ev = self.engine.step_on_cores(self)
        except Exception as e:  # noqa: BLE001 - end the affected requests, restart, keep serving
            log.exception("engine %s step failed; restarting it", self.lane)
            ended = self.engine.reset(f"engine step failed: {type(e).__name__}: {e}")
            self._publish(StatusEvent(event="engine_restarted", error=str(e)))
            self._stream(ended, [])
            return
        if not (ev.entries or ev.finished or ev.preempted):  # (a step may only preempt: every row went)
            if ev.waits:  # nothing ran, but why requests wait changed (a static batch filling up)
                self._publish(WaitsEvent(t=ev.t_end, waits={str(k): v for k, v in ev.waits.items()}))
            self._rest()
            self._wake.wait(POLL_WAIT_S)  # nothing schedulable yet (static: the batch is filling)
            self._wake.clear()
            return
        self.steps += 1
        self.last_step_ms = 1000 * ev.duration_s
        roofline = None if self.roofline is None else self.roofline.step(ev)
        self._stream(list(ev.sampled), ev.finished, StepMessage(event=ev, roofline=roofline))
        rest = self.host.pace_s(ev.num_running) - (time.perf_counter() - t0)
        if rest > 0:
            self._rest()  # slow motion: nothing computes on its cores while it waits (a GPU ends the step in flight)
            self._halt.wait(rest)

    def _stream(self, sampled: list[int], finished: list[int], step_item: StepMessage | None = None) -> None:
        """Push new text to the handles and hand over final outputs; publish the step (with
        its text deltas) before the requests it finished, so a client sees the last delta first."""
        deltas, done = {}, []
        for rid in set(sampled) | set(finished):
            h = self.handles.get(rid)
            if h is None:
                continue
            text = self.engine.live_text(rid)
            if text is None:
                out = self.engine.pop_output(rid)
                d = h.finish(out)
                del self.handles[rid]
                done.append(FinishedEvent.of(out))
            else:
                d = h.update(text)
            if d:
                deltas[rid] = d
        if step_item is not None:
            step_item.deltas = deltas
            self._publish(step_item)
        for item in done:
            self._publish(item)

    def _publish(self, event) -> None:
        event.lane, event.strategy = self.lane, self.cfg.strategy
        self.host.publish(event)

    # ---- submissions -------------------------------------------------------------------------
    def _add(self, handle: RequestHandle, sub: Submission) -> None:
        if self.engine is None:  # why is the presenter's to read (status): it may name server paths
            self._refuse(handle, sub, f"lane '{self.lane}' is not available: it could not start")
            return
        if self._pending_cfg is not None:
            # Queued until the lane restarts. Accepted now, so that no caller waits on a drain that
            # may take long (or, paused, forever); if the new engine refuses it, the handle says why.
            self._deferred.append((handle, sub))
            handle.accept(hold_back=_hold_back(sub.params))
            return
        if self._drain_then_stop:
            self._refuse(handle, sub, f"lane '{self.lane}' was removed")
            return
        try:
            ids = self.engine.chat_prompt(sub.messages) if sub.messages is not None else sub.prompt
            self.engine.add_request(ids, sub.params, arrival_s=sub.arrival_s, request_id=handle.request_id,
                                    priority=sub.priority, tenant=sub.tenant)
        except ValueError as e:
            self._refuse(handle, sub, str(e))
            return
        except Exception as e:  # noqa: BLE001 - a prompt the tokenizer chokes on is the caller's error too
            self._refuse(handle, sub, f"the prompt could not be read: {type(e).__name__}: {e}")
            return
        handle.accept(hold_back=_hold_back(sub.params))
        self.handles[handle.request_id] = handle
        self._arrived(handle, sub, len(self.engine.get_output(handle.request_id).prompt_token_ids))

    def _arrived(self, handle: RequestHandle, sub: Submission, num_prompt_tokens: int | None) -> None:
        self._publish(RequestEvent(request_id=handle.request_id, tag=handle.tag,
                                   prompt=sub.prompt if isinstance(sub.prompt, str) else None,
                                   messages=sub.messages, num_prompt_tokens=num_prompt_tokens,
                                   max_tokens=sub.params.max_tokens, arrival_s=sub.arrival_s,
                                   priority=sub.priority, tenant=sub.tenant, name=sub.name))

    def _refuse(self, handle: RequestHandle, sub: Submission, why: str) -> None:
        """The engine would not take it: its caller hears why; one that was told the lane took it (it was
        queued during a reconfigure) is also seen to end by everyone who reads the stream."""
        if handle.accepted.is_set():
            self._end_unstarted(handle, sub, "error", why)
        handle.reject(why)

    def _end_unstarted(self, handle: RequestHandle, sub: Submission, reason: str, why: str | None) -> RequestOutput:
        """Publish a request that the lane took but no engine ever ran (queued during a reconfigure) as
        arrived and ended, so that no reader (a socket client, the views, /metrics) waits for it."""
        ids = list(sub.prompt) if isinstance(sub.prompt, list) else []  # (text: never tokenized here)
        out = RequestOutput(request_id=handle.request_id, prompt_token_ids=ids, output_token_ids=[], text="",
                            finish_reason=reason, arrival_s=sub.arrival_s, first_token_s=None,
                            finish_s=self.host.clock(), error=why)
        self._arrived(handle, sub, len(ids) if ids else None)
        self._publish(FinishedEvent.of(out))
        return out

    def _abort(self, request_id: int, reason: str | None = None) -> None:
        parked = [d for d in self._deferred if d[0].request_id == request_id]
        for handle, sub in parked:  # queued during a reconfigure: never reaches the engine
            self._deferred.remove((handle, sub))
            handle.finish(self._end_unstarted(handle, sub, "abort", reason))
        if self.engine is not None and self.engine.abort(request_id, reason):
            self._stream([], [request_id])  # the caller hears now, even if no step follows

    def _abort_all(self, reason: str) -> None:
        for handle, _ in list(self._deferred):
            self._abort(handle.request_id, reason)
        for rid in list(self.handles):
            self._abort(rid, reason)
        for h in list(self.handles.values()):
            h.reject(reason)
        self.handles.clear()

    # ---- reconfiguration and stopping ----------------------------------------------------------
    def _start_reconfigure(self, cfg: EngineConfig) -> None:
        if self.engine is None:  # never loaded: nothing to drain, try the new settings now
            self._pending_cfg = cfg
            self._apply_pending()
            return
        self._pending_cfg = cfg
        self.engine.draining = True  # static: launch the partial batch instead of waiting for more
        self._publish(StatusEvent(event="reconfiguring"))

    def _start_drain_stop(self) -> None:
        if self.engine is None:
            self._halt.set()
        else:
            self.engine.draining = True

    def _maybe_finish_drain(self) -> bool:
        """When in-flight work is done: apply a pending config or stop. True if the loop should restart."""
        if self.engine.has_unfinished() or not (self._pending_cfg or self._drain_then_stop):
            return False
        if self._drain_then_stop:
            self._halt.set()
            return True
        self._apply_pending()
        return True

    def _apply_pending(self) -> None:
        """Build the engine for the pending settings on the memory the old one gave back, or, where that fails,
        the old settings' engine again; then admit the submissions that waited."""
        cfg = self._pending_cfg  # (cleared once the lane runs an engine again: status says reconfiguring)
        had, counted = self.engine is not None, self.engine.step_count if self.engine is not None else 0
        self._let_go_of_old(cfg)
        error = None
        try:
            new = self._engine_for(cfg)
        except Exception as e:  # noqa: BLE001 - back to the old settings, tell everyone
            log.exception("engine %s: new config failed; back to the old one", self.lane)
            error = frames_cleared(e)  # (its frames held the failed engine and its pool)
        if error is not None:
            release_freed_memory()
            new = self._engine_again() if had else None
        if new is not None:
            new.step_count = counted  # the lane's iterations go on counting across a restart
        dropped = None if self.engine is None else weakref.ref(self.engine)
        self.engine = new
        if error is None:
            self.cfg, self.load_error = cfg, None
        self._publish(StatusEvent(event="restarted") if error is None else
                      StatusEvent(event="configure_failed", error=str(error)))
        release_freed_memory(dropped)  # the old engine's weights, where nothing shares them
        self._pending_cfg = None
        self.host.restarted(self, cfg, error)
        deferred, self._deferred = self._deferred, []
        for args in deferred:
            self._add(*args)


def _release_kv(engine: LLMEngine) -> list[weakref.ref]:
    """A drained engine closed and its KV pools let go (LLMEngine.release_kv): weak references to them."""
    engine.close()
    with CUDA_CAPTURE_LOCK:  # (its graphs must not be freed inside another lane's capture)
        return engine.release_kv()
