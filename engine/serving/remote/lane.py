"""RemoteWorker: a lane whose engine is an OpenAI-compatible server elsewhere (vLLM, SGLang, ...).

It stands where an EngineWorker stands (the service talks to both the same way) and publishes the same
events, built from what this client sees: when a request was sent, when each streamed chunk arrived,
when it finished (engine/events.py says what each event means for such a lane). One thread runs an
asyncio loop with one httpx client: at most `max_concurrency` requests stream at once, each read
times out after `timeout_s`, and every failure (server down, slow, HTTP error, error event, dropped
stream) ends that request with finish_reason "error" and says why. An abort cancels the request's
stream, which closes its connection (vLLM and SGLang then abort it too). A remote server cannot be
paused or slowed down: pause, step and slow motion leave this lane alone.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

import httpx

from ...events import (
    DECODE,
    PREFILL,
    REMOTE,
    FinishedEvent,
    RequestEvent,
    StatusEvent,
    StepEntry,
    StepEvent,
    StepMessage,
)
from ...request import RequestOutput
from ...untrusted import is_int
from ..handles import RequestHandle
from ..lane_host import LaneHost
from . import metrics as remote_metrics
from .bounded import TooMuch
from .config import RemoteConfig
from .stream import Chunk, RemoteError, stream

log = logging.getLogger(__name__)
TICK_S = 0.05         # at most one step event per tick: bounded however fast the server streams
CONNECT_S = 5.0
UNKNOWN_TOKEN = -1    # a remote server streams text: each counted token's id is unknown
MAX_REPORTED_PROMPT = 1 << 20  # prompt tokens believed from a server's usage report


@dataclass(eq=False)
class _Flight:
    """One request on the remote server, as timed here."""
    handle: RequestHandle
    sub: object            # the worker's Submission
    prompt_tokens: int | None
    task: asyncio.Task | None = None
    aborted: bool = False  # asked to abort before its task started
    sent_s: float | None = None
    first_s: float | None = None
    finish_s: float | None = None
    text: str = ""
    chunks: int = 0        # chunks that carried text
    new_chunks: int = 0    # of those, since the last tick
    announced: bool = False  # its first chunk went out in a step (as prefill)
    usage: dict | None = None
    reason: str | None = None
    error: str | None = None


class RemoteWorker(threading.Thread):
    engine = None     # no engine in this process (nothing to share weights with)
    roofline = None
    load_error = None

    def __init__(self, host: LaneHost, lane: str, cfg: RemoteConfig):
        super().__init__(daemon=True, name=f"inflight-{lane}")
        self.host, self.lane, self.cfg = host, lane, cfg
        self.handles: dict[int, _Flight] = {}  # added by callers, removed by the loop, under _lock
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._closing = False   # stopping: new submissions are refused
        self._stop_reason = "the service stopped"
        self._drain = False
        self._ended: list[_Flight] = []
        self._window_start: float | None = None  # first thing that happened since the last tick
        self._last_t, self._last_wall = 0.0, 0.0
        self.steps = 0
        self.last_step_ms = 0.0
        self.gauges: dict | None = None  # the server's latest /metrics reading
        self.metrics_stopped: str | None = None  # why its /metrics is no longer polled

    # ---- called from other threads -----------------------------------------------------------
    def add(self, handle: RequestHandle, sub) -> None:
        self._ready.wait(5)
        with self._lock:
            if self._closing or self._loop is None:
                handle.reject(f"lane '{self.lane}' was removed")
                return
            f = _Flight(handle, sub, len(sub.prompt) if isinstance(sub.prompt, list) else None)
            self.handles[handle.request_id] = f
        handle.accept(hold_back=0)  # the server applies stop strings: the text it streams is final
        self._publish(RequestEvent(request_id=handle.request_id, tag=handle.tag,
                                   prompt=sub.prompt if isinstance(sub.prompt, str) else None,
                                   messages=sub.messages, num_prompt_tokens=f.prompt_tokens,
                                   max_tokens=sub.params.max_tokens, arrival_s=sub.arrival_s,
                                   priority=sub.priority, tenant=sub.tenant, name=sub.name))
        self._call(self._launch, f)

    def abort(self, request_id: int) -> None:
        self._call(self._abort, request_id)

    def stop(self, drain: bool = False, reason: str = "the service stopped") -> None:
        self._closing, self._stop_reason = True, reason
        self._call(self._start_drain if drain else self._shutdown)

    def step_once(self) -> None:
        pass  # a remote server cannot be single-stepped

    def wake(self) -> None:
        pass

    def wait_ready(self, timeout: float | None = None) -> None:
        if not self._ready.wait(timeout):
            raise TimeoutError(f"lane '{self.lane}' did not start within {timeout} s")

    def idle(self) -> bool:
        return not self.handles

    def status(self) -> dict:
        flights = list(self.handles.values())
        sent = sum(f.sent_s is not None and f.finish_s is None for f in flights)
        return {"ready": self._ready.is_set(), "error": None, "reconfiguring": False, "in_flight": len(flights),
                "steps": self.steps, "last_step_ms": self.last_step_ms, "kv_blocks": None, "kv_used_blocks": None,
                "num_running": sent, "num_waiting": sum(f.sent_s is None for f in flights), "max_model_len": None,
                "device": f"remote {self.cfg.host}", "remote_metrics": self.gauges,
                "remote_metrics_stopped": self.metrics_stopped}

    def _call(self, fn, *args) -> None:
        self._ready.wait(5)
        with self._lock:
            loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # the loop closed meanwhile: its last sweep ended every request
                pass

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # noqa: BLE001 - the lane's requests were ended by the sweep
            log.exception("remote lane %s failed", self.lane)
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._stopping, self._dirty = asyncio.Event(), asyncio.Event()
        self._sem = asyncio.Semaphore(self.cfg.max_concurrency)
        timeout = httpx.Timeout(self.cfg.timeout_s, connect=min(CONNECT_S, self.cfg.timeout_s))
        limits = httpx.Limits(max_connections=self.cfg.max_concurrency + 1)  # + the /metrics poll
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            self._client = client
            with self._lock:
                self._loop = asyncio.get_running_loop()
            self._ready.set()
            self._publish(StatusEvent(event="ready"))
            side = [asyncio.create_task(self._ticker())]
            if self.cfg.metrics:
                side.append(asyncio.create_task(self._poll_metrics(client)))
            await self._stopping.wait()
            tasks = [f.task for f in list(self.handles.values()) if f.task is not None] + side
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with self._lock:
                self._loop = None  # from now on add() refuses
            for f in list(self.handles.values()):
                self._end(f, "abort", self._stop_reason)
            self._tick()

    async def _poll_metrics(self, client: httpx.AsyncClient) -> None:
        self.metrics_stopped = await remote_metrics.poll(client, self.cfg, self._on_metrics, self.host.clock)

    def _launch(self, f: _Flight) -> None:
        if f.aborted:
            self._end(f, "abort", "aborted")
        elif not self._stopping.is_set() and f.finish_s is None:
            f.task = asyncio.create_task(self._run(f))
            # cancelled before its first step, the task never reaches _run's handler: end it here
            f.task.add_done_callback(lambda t, f=f: t.cancelled() and self._end(f, "abort", self._why_cancelled()))

    def _abort(self, request_id: int) -> None:
        f = self.handles.get(request_id)
        if f is None:
            return
        if f.task is None:
            f.aborted = True
        else:
            f.task.cancel()  # closes its stream

    def _why_cancelled(self) -> str:
        """A request's task was cancelled: the lane stopping (and why), or its own abort."""
        return self._stop_reason if self._stopping.is_set() else "aborted"

    def _start_drain(self) -> None:
        self._drain = True
        if not self.handles:
            self._stopping.set()

    def _shutdown(self) -> None:
        self._stopping.set()

    async def _run(self, f: _Flight) -> None:
        where = f"remote server {self.cfg.remote}"
        try:
            async with self._sem:
                f.sent_s = self.host.clock()
                async with asyncio.timeout(self.cfg.max_request_s):  # silence is timeout_s; this, the whole
                    async for chunk in stream(self._client, self.cfg, f.sub):
                        self._on_chunk(f, chunk)
            self._end(f, f.reason or "stop")
        except asyncio.CancelledError:
            self._end(f, "abort", self._why_cancelled())
        except httpx.TimeoutException as e:
            self._end(f, "error", f"{where}: no answer within {self.cfg.timeout_s:g} s ({type(e).__name__})")
        except TimeoutError:
            self._end(f, "error", f"{where}: not finished within max_request_s={self.cfg.max_request_s:g} s")
        except httpx.HTTPError as e:
            self._end(f, "error", f"{where}: {type(e).__name__}: {e or 'connection failed'}")
        except (RemoteError, TooMuch) as e:
            self._end(f, "error", f"{where}: {e}")
        except Exception as e:  # noqa: BLE001 - one request's surprise must not stop the lane
            log.exception("remote lane %s: request %d failed", self.lane, f.handle.request_id)
            self._end(f, "error", f"{where}: {type(e).__name__}: {e}")

    def _on_chunk(self, f: _Flight, chunk: Chunk) -> None:
        if chunk.text:
            if f.first_s is None:
                f.first_s = self.host.clock()
            f.text += chunk.text
            f.chunks += 1
            f.new_chunks += 1
            self._mark()
        f.reason = chunk.finish_reason or f.reason
        f.usage = chunk.usage or f.usage

    def _end(self, f: _Flight, reason: str, error: str | None = None) -> None:
        if f.finish_s is not None:
            return
        f.finish_s, f.reason, f.error = self.host.clock(), reason, error
        self._ended.append(f)
        self._mark()

    def _mark(self) -> None:
        if self._window_start is None:
            self._window_start = self.host.clock()
        self._dirty.set()

    def _on_metrics(self, ev) -> None:
        self.gauges = {"t": ev.t, "num_running": ev.num_running, "num_waiting": ev.num_waiting,
                       "kv_usage": ev.kv_usage}
        self._publish(ev)

    def _publish(self, event) -> None:
        event.lane, event.strategy = self.lane, REMOTE
        self.host.publish(event)

    # ---- ticks: what happened since the last one, as one step event ------------------------------
    async def _ticker(self) -> None:
        while True:
            await self._dirty.wait()
            rest = self._last_wall + TICK_S - time.perf_counter()
            if rest > 0:
                await asyncio.sleep(rest)
            self._dirty.clear()
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - a bad tick must not stop every later one
                log.exception("remote lane %s: tick failed", self.lane)

    def _tick(self) -> None:
        """Publish the step (requests with text so far, their new text) and then the requests that
        ended since the last tick; hand their text and outputs to the handles."""
        t1 = self.host.clock()
        t0 = max(self._last_t, self._window_start if self._window_start is not None else t1)
        self._window_start, self._last_t, self._last_wall = None, t1, time.perf_counter()
        ended, self._ended = self._ended, []
        entries, admitted = self._entries()
        deltas = {f.handle.request_id: d for f in list(self.handles.values())
                  if f.finish_s is None and (d := f.handle.update(f.text))}
        done = []
        for f in ended:
            out = self._output(f)
            if d := f.handle.finish(out):
                deltas[out.request_id] = d
            done.append(FinishedEvent.of(out))
            with self._lock:
                self.handles.pop(out.request_id, None)
        if entries:
            self.steps += 1
            self.last_step_ms = 1000 * (t1 - t0)
            self._publish(StepMessage(event=self._step_event(t0, t1, entries, admitted, ended), deltas=deltas))
        for ev in done:
            self._publish(ev)
        if self._drain and not self.handles:
            self._stopping.set()

    def _entries(self) -> tuple[list[StepEntry], list[int]]:
        """A row for every request that has had text: its first tick as prefill, later ones as decode."""
        entries, admitted = [], []
        for rid, f in list(self.handles.items()):
            if f.first_s is None:
                continue
            ctx = (f.prompt_tokens or 0) + f.chunks
            if f.announced:
                entries.append(StepEntry(rid, DECODE, f.new_chunks, ctx))
            else:
                entries.append(StepEntry(rid, PREFILL, f.prompt_tokens or 0, ctx))
                admitted.append(rid)
                f.announced = True
            f.new_chunks = 0
        return entries, admitted

    def _step_event(self, t0: float, t1: float, entries, admitted, ended) -> StepEvent:
        flights = list(self.handles.values())
        waiting = sum(f.sent_s is None for f in flights)  # held back by max_concurrency
        return StepEvent(step=self.steps, strategy=REMOTE, t_start=t0, t_end=t1, entries=entries,
                         num_waiting=waiting, num_running=len(flights) - waiting, admitted=admitted,
                         finished=[f.handle.request_id for f in ended], preempted=[],
                         tokens_used=sum(e.num_tokens for e in entries), token_budget=0, num_blocks=0,
                         block_size=0, used_blocks=0, block_tables={}, kv_tokens={}, reserved_unused_slots=0)

    @staticmethod
    def _output(f: _Flight) -> RequestOutput:
        """The request's result; token counts from the server's usage when it sent one, else counted here."""
        usage = f.usage or {}
        # the server's counts, bounded: they size lists here
        n_prompt = min(_count(usage.get("prompt_tokens"), f.prompt_tokens or 0), MAX_REPORTED_PROMPT)
        n_out = min(_count(usage.get("completion_tokens"), f.chunks), f.sub.params.max_tokens)
        prompt = f.sub.prompt if isinstance(f.sub.prompt, list) else [UNKNOWN_TOKEN] * n_prompt
        return RequestOutput(request_id=f.handle.request_id, prompt_token_ids=list(prompt),
                             output_token_ids=[UNKNOWN_TOKEN] * n_out, text=f.text, finish_reason=f.reason,
                             arrival_s=f.sub.arrival_s, first_token_s=f.first_s, finish_s=f.finish_s, error=f.error)


def _count(reported, fallback: int) -> int:
    return reported if is_int(reported) and reported >= 0 else fallback
