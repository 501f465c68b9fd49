"""DisaggregatedEngine: one lane's prefill on one LLMEngine, its decode on another, KV handed between.

Each half has its own KV pool (half of the lane's KV memory; on a machine with two GPUs, its own GPU)
and steps on its own thread, with half of the lane's CPU cores (engine/cpu_share.py); where the lane has
fewer than two cores (two lanes on a 2-core machine), the halves step in turn. A request starts on the
prefill half; the step that samples its first token hands it on, its blocks held there. The decode half
admits it like any waiting request: the blocks are copied into its own pool at the start of that step
(engine/kv/transfer.py, timed), then released on the prefill side. A decode pool that is full holds
requests (and their prefill blocks) back: the prefill half then waits for blocks, as it would.

One coordinator, the caller's thread (a lane's worker, the benchmark): it touches a half only while no
step of that half is in flight. What it has for a half that is mid-step (requests, hand-offs, aborts,
blocks to release) waits in the lane's mail (_Mail); every call (add_request, abort, step, rest) first
takes in the steps that have landed and hands each idle half what waits for it. Steps start only in step(), on each idle
half with work; it returns the StepEvent of whichever half lands first, tagged with its part and
numbered in the lane's one sequence of iterations, while the other half goes on stepping: decode steps
never wait behind a long prefill. Each half has its own tokenizer, and so has the coordinator.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import torch
from transformers import AutoTokenizer

from .config import EngineConfig, resolve_device
from .cpu_share import CORES
from .detokenizer import apply_chat_template
from .device_memory import GiB
from .events import DECODE_PART, PREFILL_PART, StepEvent
from .kv.sizing import kv_budget_bytes
from .llm_engine import LLMEngine
from .model.warmup import merged_warmup
from .outputs import Outputs, ReadsOutputs
from .request import SamplingParams
from .untrusted import is_int


def half_configs(cfg: EngineConfig, kv_lanes: int = 1) -> tuple[EngineConfig, EngineConfig]:
    """The prefill half's config and the decode half's: the lane's, each with half its KV memory (the lane's
    part of the device's among kv_lanes lanes) and, where there are two GPUs, a GPU each."""
    device = resolve_device(cfg.device)
    two_gpus = device.type == "cuda" and torch.cuda.device_count() >= 2
    if cfg.num_kv_blocks is not None:
        kv = {"num_kv_blocks": max(1, cfg.num_kv_blocks // 2)}
    elif two_gpus:
        kv = {}  # each GPU's own budget
    else:
        kv = {"kv_cache_memory_gb": kv_budget_bytes(cfg, device, kv_lanes) / 2 / GiB}
    base = dataclasses.replace(cfg, disaggregated=False, overlap=False, **kv)
    if not two_gpus:
        return base, base
    return dataclasses.replace(base, device="cuda:0"), dataclasses.replace(base, device="cuda:1")


class _Half:
    """One engine of the lane, the thread its steps run on, and the step in flight (if any)."""

    def __init__(self, part: str, engine: LLMEngine, group: object, turns: threading.Lock):
        self.part, self.engine, self.group, self.turns = part, engine, group, turns
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=f"inflight-{part}", initializer=CORES.lane_thread)
        self.inflight: Future | None = None
        # its last step computed nothing (a prefill pool full of blocks held for hand-offs): it steps again
        # once something is handed to it, instead of spinning
        self.stalled = False

    def launch(self) -> None:
        self.inflight = self.pool.submit(self.engine.step_on_cores, self, group=self.group, fraction=0.5,
                                         turns=self.turns)

    def has_work(self) -> bool:
        return not self.stalled and (self.engine.has_unfinished() or self.engine.has_news())

    def rest(self) -> None:
        """Its share of the cores goes back (it is not stepping)."""
        CORES.resting(self)

    def take(self) -> StepEvent:
        """The event of its step in flight, which has landed."""
        fut, self.inflight = self.inflight, None
        ev = fut.result()  # a step that raised: the caller resets the lane
        self.stalled = not (ev.entries or ev.finished or ev.preempted)
        return ev


class _Mail:
    """What waits for a half while it is mid-step: new requests and blocks to release for the prefill
    half, hand-offs for the decode half, aborts for whichever half holds the request."""

    def __init__(self):
        self.adds: list = []       # new requests for the prefill half
        self.handoffs: list = []   # (request, its blocks in the prefill pool) for the decode half
        self.release: list[int] = []  # requests whose prefill blocks the decode half no longer needs
        self.aborts: list[tuple[int, str | None]] = []

    def deliver(self, half: _Half, prefill: bool, live: dict) -> tuple[bool, list[int]]:
        """Hand an idle half what waits for it: (whether it was given anything, the requests it aborted)."""
        eng = half.engine
        if prefill:
            given = bool(self.release or self.adds)
            eng.hand_offs.release(self.release)
            for req in self.adds:
                eng.enqueue(req)
            self.release, self.adds = [], []
        else:
            given = bool(self.handoffs)
            for req, blocks in self.handoffs:
                eng.adopt(req, blocks)
            self.handoffs = []
        aborted = []
        for rid, reason in list(self.aborts):
            if rid not in live:
                self.aborts.remove((rid, reason))
            elif eng.abort(rid, reason):
                self.aborts.remove((rid, reason))
                aborted.append(rid)
        if not prefill and eng.cache.returned:  # copied, or ended first: release them there
            self.release += eng.cache.returned
            eng.cache.returned = []
        return given or bool(aborted), aborted


class DisaggregatedEngine(ReadsOutputs):
    """The LLMEngine interface (add_request, step, abort, outputs) over a prefill half and a decode half."""

    overlap = False  # each half reads its step back before the next (EngineConfig.overlap: half_configs)

    def __init__(self, cfg: EngineConfig, progress=None, clock=time.perf_counter,
                 share_weights_with: LLMEngine | DisaggregatedEngine | None = None, on_warmup=None,
                 kv_lanes: int = 1):
        if not cfg.disaggregated:
            raise ValueError("DisaggregatedEngine needs EngineConfig.disaggregated=True")
        self.cfg, self.clock = cfg, clock
        pcfg, dcfg = half_configs(cfg, kv_lanes)
        prefill = LLMEngine(pcfg, progress, clock, share_weights_with=share_weights_with, on_warmup=on_warmup,
                            kv_lanes=kv_lanes)  # (a budget of its own only on a GPU of two: half_configs)
        decode = LLMEngine(dcfg, progress, clock, share_weights_with=prefill if pcfg.device == dcfg.device else None,
                           on_warmup=on_warmup, kv_lanes=kv_lanes)
        # the halves' warm-ups, one after the other (the decode half's finds most variants compiled)
        self.warmup = merged_warmup(prefill.warmup, decode.warmup)
        prefill.hand_off_requests()
        decode.mover.senders = prefill.mover.device
        turns = threading.Lock()  # on less than two cores the halves step in turn (engine/cpu_share.py)
        self.prefill = _Half(PREFILL_PART, prefill, self, turns)
        self.decode = _Half(DECODE_PART, decode, self, turns)
        self.runner = prefill.runner
        # the caller's own (fast tokenizers must not be used from two threads at once)
        self.tokenizer = AutoTokenizer.from_pretrained(prefill.runner.model_dir)
        self.max_model_len = min(prefill.max_model_len, decode.max_model_len)
        self.outputs = Outputs()  # its live requests are wherever they are: a half, or queued for one
        self._next_id = 0
        self.mail = _Mail()
        self._landed: list[StepEvent] = []  # events of steps that landed, not yet returned by step()
        self._carried_waits: dict = {}  # wait reasons of empty steps not returned: go with the next event
        self._failed: Exception | None = None  # a half's step raised: step() raises it (the caller resets)
        self.step_count = 0
        self._draining = False

    # ---- the halves ---------------------------------------------------------------------------
    @property
    def halves(self) -> tuple[LLMEngine, LLMEngine]:
        return self.prefill.engine, self.decode.engine

    @property
    def cache(self):
        """The decode half's KV cache (where requests spend most of their life)."""
        return self.decode.engine.cache

    @property
    def kv_capacity_tokens(self) -> int:
        return min(e.kv_capacity_tokens for e in self.halves)

    def _total(name: str):
        """A property: the halves' values of an LLMEngine counter, added."""
        return property(lambda self: sum(getattr(e, name) for e in self.halves))

    recomputed_tokens = _total("recomputed_tokens")
    kernel_compiles = _total("kernel_compiles")
    step_s = _total("step_s")
    telemetry_s = _total("telemetry_s")
    num_running = _total("num_running")
    num_waiting = _total("num_waiting")
    del _total

    @property
    def kv_blocks(self) -> tuple[int, int]:
        """(blocks in use, blocks) of both pools together."""
        used, total = zip(*(e.kv_blocks for e in self.halves))
        return sum(used), sum(total)

    @property
    def requests(self) -> dict:
        """The unfinished requests, wherever they are (generate() reads it)."""
        return self.outputs.live

    @property
    def waits(self) -> dict[int, dict]:
        return {**self.prefill.engine.waits, **self.decode.engine.waits}

    @property
    def draining(self) -> bool:
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._draining = bool(value)  # continuous halves launch no batches: nothing to pass on

    def launch_batch(self) -> bool:
        return False

    # ---- requests -----------------------------------------------------------------------------
    def add_request(self, prompt, params: SamplingParams | None = None, arrival_s: float | None = None,
                    request_id: int | None = None, *, priority: int = 0, tenant: str | None = None) -> int:
        rid = self._next_id if request_id is None else request_id
        if is_int(rid) and self.outputs.known(rid):
            raise ValueError(f"request_id {rid} is already in use")
        req = self.prefill.engine.new_request(prompt, params, arrival_s, rid, priority=priority, tenant=tenant,
                                              tokenizer=self.tokenizer)
        self.decode.engine.check_fits(len(req.prompt_token_ids), req.params)  # its pool must hold it too
        self._next_id = max(self._next_id, rid + 1)
        self.outputs.live[rid] = req
        self.mail.adds.append(req)
        self._sync()
        return rid

    def abort(self, request_id: int, reason: str | None = None) -> bool:
        """End a request now, as LLMEngine.abort does: if the half holding it is mid-step, wait for that
        step to land first (its event is returned by a later step()). False if unknown or finished."""
        if request_id not in self.outputs.live:
            return False
        self.mail.aborts.append((request_id, reason))
        self._sync()
        while request_id in self.outputs.live:
            if not self._wait_any():
                return False  # nowhere to end it (not expected: every live request is in a half or queued for one)
        return True

    def has_unfinished(self) -> bool:
        return bool(self.outputs.live or self._landed or self._failed) or \
            any(h.inflight is not None or h.has_work() for h in self._halves())

    def chat_prompt(self, messages: list[dict], **kwargs) -> list[int]:
        return apply_chat_template(self.tokenizer, messages, **kwargs)


    # ---- stepping -----------------------------------------------------------------------------
    def step(self) -> StepEvent:
        """The next event of either half: one that has landed, else start a step on each idle half that
        has work and return the first to land (the other half goes on). Steps start only here: a paused
        caller starts none. A step that computed nothing while the other half is mid-step is not
        returned (its wait reasons go with the next event). A half's step that raised raises here."""
        self._sync()
        while not self._landed and self._failed is None:
            self._sync(launch=True)
            if not self._wait_any():  # nothing to do: an empty event
                self._landed.append(self._numbered(self.decode, self.decode.engine.step()))
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        ev = self._landed.pop(0)
        ev.waits, self._carried_waits = {**self._carried_waits, **ev.waits}, {}
        return ev

    def step_on_cores(self, owner: object) -> StepEvent:
        """step(): each half steps on its own share of the lane's cores, not on the caller's."""
        return self.step()

    def rest(self) -> None:
        """The caller is not stepping (idle, paused, slow motion): the halves not mid-step give their cores
        back."""
        self._sync()
        for half in self._halves():
            if half.inflight is None:
                half.rest()

    def _halves(self) -> tuple[_Half, _Half]:
        return self.prefill, self.decode

    def _wait_any(self) -> bool:
        """Wait for a half's step in flight to land and take it in; False if none is in flight."""
        running = [h.inflight for h in self._halves() if h.inflight is not None]
        if running:
            wait(running, return_when=FIRST_COMPLETED)
            self._sync()
        return bool(running)

    def _sync(self, launch: bool = False) -> None:
        """Take in the steps that landed, hand each idle half what waits for it; launch: start its next
        step if it has work."""
        for half in self._halves():
            if half.inflight is not None and half.inflight.done():
                self._land(half)
        for half in (self.decode, self.prefill):  # decode first: the blocks it copied go back to prefill now
            if half.inflight is not None:
                continue
            self._deliver(half)
            if not launch:
                continue
            if half.has_work():
                half.launch()
            else:
                half.rest()

    def _land(self, half: _Half) -> None:
        try:
            ev = self._numbered(half, half.take())
        except Exception as e:  # noqa: BLE001 - raised by the next step(), whichever call landed it
            self._failed = self._failed or e
            return
        other = self.decode if half is self.prefill else self.prefill
        if half.stalled and (other.inflight is not None or self._landed):
            self._carried_waits.update(ev.waits)  # nothing to show: the other half's event comes next
            return
        self._landed.append(ev)

    def _numbered(self, half: _Half, ev: StepEvent) -> StepEvent:
        """The event in the lane's terms: its part, the lane's iteration number; what it hands on queued."""
        ev.part = half.part
        self.step_count += bool(ev.entries or ev.finished)
        ev.step = self.step_count
        if half is self.prefill:
            self.mail.handoffs += self.prefill.engine.hand_offs.kv(ev.handed_off)
        self._collect(half.engine, ev.finished)
        return ev

    def _collect(self, engine: LLMEngine, request_ids: list[int]) -> None:
        for rid in request_ids:
            if rid in self.outputs.live:
                self.outputs.finish(rid, engine.pop_output(rid))

    def _deliver(self, half: _Half) -> None:
        """Hand an idle half what waits for it (a half given something steps again even if stalled)."""
        given, aborted = self.mail.deliver(half, half is self.prefill, self.outputs.live)
        self._collect(half.engine, aborted)
        half.stalled = half.stalled and not given

    # ---- restarting and closing ---------------------------------------------------------------
    def reset(self, reason: str) -> list[int]:
        """End every unfinished request with an error and start both halves afresh (the model is kept).
        Returns the requests that ended since the caller last heard: those ended now, and those the
        events it will not get (steps that landed, or were in flight) had finished."""
        for half in self._halves():
            if half.inflight is not None:
                wait([half.inflight])
                self._land(half)  # a step that raised: its requests end with the rest below
        ended = [rid for ev in self._landed for rid in ev.finished]
        self._landed, self._carried_waits, self._failed = [], {}, None
        prefill, decode = self.halves
        for req in self.mail.adds:  # every request into the half that ends it: the new ones into prefill,
            prefill.enqueue(req)
        for rid, req in prefill.hand_offs.sent.items():  # those handed on (not yet ended there) into decode
            if rid in self.outputs.live and rid not in decode.requests:
                decode.adopt(req, [])
        self.mail = _Mail()
        for eng in self.halves:
            ids = eng.reset(reason)
            self._collect(eng, ids)
            ended += ids
        for half in self._halves():
            half.stalled = False
        return ended

    @property
    def kv_pool_bytes(self) -> int:
        return sum(engine.kv_pool_bytes for engine in self.halves)

    def release_kv(self) -> list:
        """Both halves' KV pools let go, their weights kept (LLMEngine.release_kv); after close."""
        return [pool for engine in self.halves for pool in engine.release_kv()]

    def close(self) -> None:
        """Stop the halves' threads and give their cores back (the engine is not used after this)."""
        for half in self._halves():
            if half.inflight is not None:
                wait([half.inflight])
                half.inflight = None
            half.rest()
            half.pool.shutdown(wait=True)

    def __del__(self):
        for half in getattr(self, "prefill", None), getattr(self, "decode", None):
            if half is not None:
                half.pool.shutdown(wait=False)


def build_engine(cfg: EngineConfig, progress=None, clock=time.perf_counter, share_weights_with=None,
                 on_warmup=None, kv_lanes: int = 1):
    """The engine a config describes: an LLMEngine, or a DisaggregatedEngine of two (kv_lanes: LLMEngine's)."""
    if cfg.disaggregated:
        return DisaggregatedEngine(cfg, progress, clock, share_weights_with, on_warmup, kv_lanes)
    return LLMEngine(cfg, progress, clock, share_weights_with=share_weights_with, on_warmup=on_warmup,
                     kv_lanes=kv_lanes)
