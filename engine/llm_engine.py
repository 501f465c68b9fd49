"""LLMEngine: add requests, then step(): schedule -> forward -> sample -> update -> StepEvent."""
from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from .config import EngineConfig, resolve_device, resolve_overlap, resolve_warmup
from .cpu_share import CORES
from .detokenizer import detokenizer_for, prepare_detokenizer
from .device_memory import GiB
from .events import StepEvent
from .hand_offs import HandOffs
from .kv import KVCacheManager, KVPool
from .kv.block_mover import BlockMover, host_pools
from .kv.sizing import kv_block_bytes, num_kv_blocks
from .model import kernel_variants
from .model.draft_model import DraftModel
from .model.device_tokens import SampledTokens
from .model.runner import ModelRunner
from .model.sampler import make_generator
from .model.warmup import WarmupProgress, WarmupReport, warm_up
from .output_processor import OutputProcessor
from .outputs import Outputs, ReadsOutputs
from .request import Request, SamplingParams, check_priority_tenant
from .scheduler import SchedulerOutput, StaticScheduler, make_scheduler
from .step_event_builder import StepDone, StepEventBuilder, StepState
from .untrusted import is_int

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LaunchedStep:
    """A step scheduled and launched, not yet settled: its tokens (None: nothing launched, or it failed), and
    whether the scheduler counted them already (overlap: Scheduler.advance; in_flight until it settles)."""
    sched: SchedulerOutput
    done: StepDone
    t_start: float
    tokens: SampledTokens | None = None
    advanced: bool = False
    state: StepState | None = None  # overlap: what its event shows, taken when it advanced


class LLMEngine(ReadsOutputs):
    def __init__(self, cfg: EngineConfig | None = None, progress=None, clock=time.perf_counter,
                 share_weights_with: LLMEngine | None = None, on_warmup: WarmupProgress | None = None,
                 kv_lanes: int = 1):
        """share_weights_with: an engine on the same model, device and dtype whose loaded weights
        this one reuses (both may step in different threads). on_warmup: told how the warm-up goes.
        kv_lanes: the engines (a service's lanes) that share the device's memory for their KV pools,
        this one among them (kv/sizing.py: on a GPU each takes an equal part)."""
        self.cfg = cfg or EngineConfig()
        self.clock = clock
        # overlap: the next step is launched before this one is read back (engine step(); LaunchedStep)
        self.overlap = resolve_overlap(self.cfg, resolve_device(self.cfg.device))
        self.runner = ModelRunner(self.cfg, progress, share=share_weights_with and share_weights_with.runner,
                                  overlap=self.overlap)
        self.tokenizer = self.runner.tokenizer
        prepare_detokenizer(self.tokenizer)
        self.max_model_len = self._max_model_len()
        self.drafter = (DraftModel(self.cfg, self.runner, self.max_model_len, progress)
                        if self.cfg.speculative == "draft" else None)
        num_blocks = self._num_kv_blocks(kv_lanes)
        if on_warmup is not None and self.runner.torch_compile:  # (the decode graphs compile as they are made)
            on_warmup(0, 1, "compiling the decode forward with torch.compile")
        self.runner.allocate_kv(num_blocks, self.cfg.block_size,
                                max(self.cfg.max_num_seqs, self.cfg.static_batch_size), self.max_model_len)
        if self.drafter:
            self.drafter.allocate_kv(num_blocks, self.cfg.block_size)
        # swap's host pools made before the warm-up: one that does not fit says so first
        self.mover = BlockMover(self._device_pools(), host_pools(self.cfg, self._kv_shapes(), self.runner.dtype))
        self.warmup = self._warm_up(on_warmup)
        self.kernel_compiles = 0  # kernel variants compiled by this engine's steps (after its warm-up)
        # A disaggregated lane's halves (engine/disaggregated.py): the prefill half hands every request on
        # after its first token (hand_offs); the decode half copies their blocks out of mover.senders.
        self.hand_offs: HandOffs | None = None
        self.outputs = Outputs()
        self.requests = self.outputs.live  # unfinished, by id
        self.output = OutputProcessor(self.outputs)
        self.in_flight: LaunchedStep | None = None  # overlap: launched, advanced, not yet settled
        self._last_t_end = float("-inf")  # when the last step's event was made
        self._fresh_state()
        self._next_id = 0
        # Iterations that computed or finished something: what every view, log and sentence calls
        # "iteration N" (a step that only polls a filling static batch keeps the last number).
        self.step_count = 0
        # Cumulative: whole steps, and the part of them spent building StepEvents (the
        # telemetry's cost, reported by the benchmark as a share of step time).
        self.step_s = 0.0
        self.telemetry_s = 0.0

    # ---- setup -------------------------------------------------------------------------------
    def _fresh_state(self) -> None:
        self.cache = KVCacheManager(self.runner.pool.num_blocks, self.cfg.block_size,
                                    prefix_caching=self.cfg.enable_prefix_caching,
                                    num_host_blocks=self.mover.num_host_blocks)
        self.scheduler = make_scheduler(self.cfg, self.cache, self.clock)
        self.scheduler.lookahead = self.overlap
        self.event_builder = StepEventBuilder(self.cfg, host_same_ram=self.runner.device.type == "cpu",
                                              num_blocks=self.cache.num_blocks)
        if self.hand_offs is not None:
            self.hand_off_requests()

    def hand_off_requests(self) -> None:
        """A disaggregated lane's prefill half: every request leaves for the decode half after its first token."""
        self.hand_offs = HandOffs(self.scheduler, self.requests)

    def reset(self, reason: str) -> list[int]:
        """End every unfinished request with finish_reason "error" and start from an empty
        scheduler and cache (the loaded model is kept). Returns the ended request ids."""
        self.in_flight = None  # (what it computes is for requests that end here; later steps run after it)
        now, ended = self.clock(), list(self.requests)
        draining = self.scheduler.draining
        for rid in ended:
            self.output.finish(self.scheduler, self.requests[rid], "error", now, error=reason)
        self._fresh_state()
        self.scheduler.draining = draining
        return ended

    def _warm_up(self, on_warmup: WarmupProgress | None) -> WarmupReport | None:
        """Every kernel variant this engine can reach, compiled before it serves (None: no warm-up here)."""
        if not resolve_warmup(self.cfg.warmup, self.runner.device, self.runner.backend):
            return None
        runners = [self.runner] + ([self.drafter.runner] if self.drafter else [])
        largest = min(self.cfg.max_num_batched_tokens, self.max_model_len)
        chunked = self.cfg.strategy == "continuous" and self.cfg.enable_chunked_prefill
        return warm_up(runners, largest if chunked else self.max_model_len, largest, self.clock, on_warmup)

    def _max_model_len(self) -> int:
        limit = self.runner.max_positions
        want = self.cfg.max_model_len or limit
        if want > limit:
            raise ValueError(f"EngineConfig.max_model_len={want} exceeds the model's context length {limit}")
        return want

    def _kv_shapes(self) -> list:
        """The KV shapes of one block layout: the model's, and its draft model's."""
        return [self.runner.kv_shape] + ([self.drafter.kv_shape] if self.drafter else [])

    def _device_pools(self) -> list[KVPool]:
        """The KV pools of one block layout: the model's, and its draft model's."""
        return [self.runner.pool] + ([self.drafter.runner.pool] if self.drafter else [])

    def _num_kv_blocks(self, lanes: int) -> int:
        bs = self.cfg.block_size
        shapes = self._kv_shapes()
        n = num_kv_blocks(self.cfg, shapes, self.runner.dtype, self.runner.device, lanes)
        if n * bs < self.max_model_len:
            per_block = kv_block_bytes(self.cfg, shapes, self.runner.dtype)
            raise ValueError(
                f"the KV pool ({n} blocks x {bs} tokens = {n * bs} tokens, {n * per_block / GiB:.2f} GiB) "
                f"cannot hold one request of max_model_len={self.max_model_len} tokens; raise num_kv_blocks "
                f"or kv_cache_memory_gb, or lower max_model_len")
        return n

    @property
    def waits(self) -> dict[int, dict]:
        """Every waiting request -> why, as the last step event reported."""
        return self.event_builder.waits

    @property
    def recomputed_tokens(self) -> int:
        """Tokens computed again after a preemption dropped their KV (since this engine's last reset)."""
        return self.scheduler.recomputed_tokens

    @property
    def kv_capacity_tokens(self) -> int:
        return self.cache.num_blocks * self.cfg.block_size

    # ---- requests ----------------------------------------------------------------------------
    def add_request(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                    arrival_s: float | None = None, request_id: int | None = None, *, priority: int = 0,
                    tenant: str | None = None) -> int:
        """Queue a request; bad input raises ValueError and leaves the engine untouched.

        request_id: a caller-chosen id (the service gives one submission the same id on every
        strategy); by default the next free one. priority (lower first) and tenant are read by the
        scheduling policy (EngineConfig.scheduling_policy)."""
        req = self.new_request(prompt, params, arrival_s, request_id, priority=priority, tenant=tenant)
        self.enqueue(req)
        return req.request_id

    def new_request(self, prompt: str | Sequence[int], params: SamplingParams | None = None,
                    arrival_s: float | None = None, request_id: int | None = None, *, priority: int = 0,
                    tenant: str | None = None, tokenizer=None) -> Request:
        """add_request's checks and its Request, not yet queued (nothing else here changes but the next
        free id): a disaggregated lane builds requests while its prefill half may be mid-step, encoding
        text with its own `tokenizer`."""
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        params.validate()
        check_priority_tenant(priority, tenant)
        ids = self._prompt_ids(prompt, tokenizer or self.tokenizer)
        self.check_fits(len(ids), params)
        rid = self._new_id(request_id)
        req = Request(rid, ids, params, arrival_s if arrival_s is not None else self.clock(),
                      eos_token_ids=self.runner.eos_token_ids, priority=priority, tenant=tenant)
        req.generator = make_generator(params.seed, self.runner.device)
        req.detok = detokenizer_for(tokenizer or self.tokenizer, ids)
        req.stops = params.stop_strings()
        return req

    def enqueue(self, req: Request) -> None:
        """Queue a request new_request made (its text is detokenized here, with this engine's tokenizer)."""
        req.detok.tokenizer = self.tokenizer
        self.requests[req.request_id] = req
        self.scheduler.add(req)

    def _new_id(self, request_id: int | None) -> int:
        if request_id is None:
            request_id = self._next_id
        elif not is_int(request_id) or request_id < 0:
            raise ValueError(f"request_id must be an integer >= 0, got {request_id!r}")
        elif self.outputs.known(request_id):
            raise ValueError(f"request_id {request_id} is already in use")
        self._next_id = max(self._next_id, request_id + 1)
        return request_id

    def _prompt_ids(self, prompt, tokenizer) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt is empty")
            ids = tokenizer.encode(prompt, add_special_tokens=True)
        elif isinstance(prompt, Sequence) and all(is_int(t) for t in prompt):
            ids = list(prompt)
            bad = [t for t in ids if not 0 <= t < self.runner.vocab_size]
            if bad:
                raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary [0, {self.runner.vocab_size})")
        else:
            raise ValueError(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}")
        if not ids:
            raise ValueError("prompt is empty (no tokens)")
        return ids

    def check_fits(self, prompt_len: int, params: SamplingParams) -> None:
        total = prompt_len + params.max_tokens
        if total > self.max_model_len:
            raise ValueError(
                f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) = {total} exceeds the "
                f"model's context limit max_model_len={self.max_model_len}")
        if total > self.kv_capacity_tokens:
            raise ValueError(
                f"prompt + max_tokens = {total} tokens can never fit the KV pool of {self.kv_capacity_tokens} "
                f"tokens ({self.cache.num_blocks} blocks x {self.cfg.block_size})")
        if not self.cfg.enable_chunked_prefill and total > self.cfg.max_num_batched_tokens:
            raise ValueError(
                f"prompt + max_tokens = {total} tokens exceeds max_num_batched_tokens="
                f"{self.cfg.max_num_batched_tokens}, which must hold a whole (re)computed prompt when "
                f"chunked prefill is off")

    def abort(self, request_id: int, reason: str | None = None) -> bool:
        """Abort a request (reason: why, kept as its error); False if it is unknown or already finished."""
        req = self.requests.get(request_id)
        if req is None:
            return False
        self.output.finish(self.scheduler, req, "abort", self.clock(), error=reason)
        self.scheduler.on_step_done()
        return True

    def adopt(self, req: Request, blocks: list[int]) -> None:
        """A disaggregated lane's decode half: take over a request the prefill half handed on, its KV in
        `blocks` of mover.senders (copied here when the scheduler admits it)."""
        req.detok.tokenizer = self.tokenizer  # this thread's own from now on
        self.requests[req.request_id] = req
        self.cache.incoming[req.request_id] = blocks
        self.scheduler.add(req)

    def has_news(self) -> bool:
        """Something for the next StepEvent to report even if nothing is scheduled (a request ended)."""
        return self.output.has_news()

    def launch_batch(self) -> bool:
        """Static/dynamic: launch what waits as a batch at the next step, full or not (the presenter's
        button). False when there is nothing to launch (continuous, or nothing waits)."""
        if not isinstance(self.scheduler, StaticScheduler) or not self.scheduler.waiting:
            return False
        self.scheduler.launch_now = True
        return True

    @property
    def draining(self) -> bool:
        """True when no more requests are coming: static/dynamic then launch a partial batch
        instead of waiting for a full one (generate() sets it for its run)."""
        return self.scheduler.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.scheduler.draining = bool(value)

    def has_unfinished(self) -> bool:
        return bool(self.requests) or self.scheduler.has_work() or self.in_flight is not None

    @property
    def num_running(self) -> int:
        return self.scheduler.num_running

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    @property
    def kv_blocks(self) -> tuple[int, int]:
        """(blocks in use, blocks) of the KV pool (the model's block layout)."""
        return self.cache.num_blocks - self.cache.num_free, self.cache.num_blocks

    # ---- one iteration -----------------------------------------------------------------------
    def step(self) -> StepEvent:
        """One iteration: schedule and launch it, then settle it (its tokens read back, made output) into its
        event. With overlap the step after it is scheduled and launched first, on the counts it advanced,
        so the GPU runs that one while the host settles this one (EngineConfig.overlap)."""
        launched = self.in_flight = self.in_flight or self._launch()
        self._advance(launched)
        follows = self._launch() if launched.advanced else None
        try:
            return self._settle(launched)
        except Exception as e:  # (a bug): its requests end with it, none left with a token pending
            self._failed(launched.sched, e)
            raise
        finally:
            self.in_flight = None
            if follows is not None:
                self._advance(follows)  # (after the settle above: it ends requests this one no longer computes)
                if follows.sched.rows or follows.sched.moves or follows.sched.preempted:  # (else all ended above)
                    self.in_flight = follows

    def _launch(self) -> LaunchedStep:
        """Schedule a step, run its block moves and launch its forward (on a GPU, without waiting for it)."""
        t_start = self.clock()
        launched = LaunchedStep(self.scheduler.schedule(), StepDone(), t_start)
        sched = launched.sched
        if sched.rows or sched.moves:  # a step may only swap out: every running request preempted
            try:
                launched.done.swapped, launched.done.handoffs = self.mover.run(sched.moves)
                launched.tokens = self._forward(sched) if sched.rows else None
            except Exception as e:  # a failed forward ends the batch's requests, not the engine
                self._failed(sched, e)
        return launched

    def _advance(self, launched: LaunchedStep) -> None:
        """Overlap: the launched step's tokens counted at once, before they are read back (Scheduler.advance),
        so that the next step can be scheduled while this one runs."""
        if self.overlap and not launched.advanced and launched.tokens is not None:
            self.scheduler.advance(launched.sched)
            launched.advanced = True
            # what its event shows: the state now, before the next step is scheduled on it (telemetry's time)
            t0 = self.clock()
            launched.state = self.event_builder.snapshot(launched.sched, self.scheduler)
            self.telemetry_s += self.clock() - t0

    def _settle(self, launched: LaunchedStep) -> StepEvent:
        """Wait for a launched step's tokens and make them output; its event."""
        sched, done = launched.sched, launched.done
        if sched.rows:
            tokens = []
            try:
                tokens = launched.tokens.tolist() if launched.tokens is not None else []
            except Exception as e:  # an error the device raised while it ran the step
                self._failed(sched, e)
            now = self.clock()
            new = (self.scheduler.settle(sched, launched.tokens.rows, tokens, now) if launched.advanced
                   else self.scheduler.update(sched, tokens, now))
            done.sampled, done.answer_ends = self.output.process(self.scheduler, sched, new, now)
            if self.hand_offs is not None:
                self.hand_offs.take(sched.rows)
        self.scheduler.on_step_done()
        t_end = self.clock()
        t_start = max(launched.t_start, self._last_t_end)  # (overlap: from where the step before ended)
        self.step_count += bool(sched.rows or self.output.has_news())
        ev = self._event(sched, done, launched.state, t_start, t_end)
        self._last_t_end = t_done = self.clock()
        self.telemetry_s += t_done - t_end
        self.step_s += t_done - t_start
        return ev

    def _failed(self, sched: SchedulerOutput, error: Exception) -> None:
        log.exception("engine step failed", exc_info=error)
        self.output.fail(self.scheduler, sched.rows, error, self.clock())

    def _forward(self, sched: SchedulerOutput) -> SampledTokens:
        compiled = kernel_variants.compiled_in_this_thread()
        if self.drafter:
            self.drafter.propose(sched.rows, self.cache)
        tokens = self.runner.launch(sched.rows, self.cache)
        self.kernel_compiles += kernel_variants.compiled_in_this_thread() - compiled
        return tokens

    # ---- telemetry ---------------------------------------------------------------------------
    def _event(self, sched: SchedulerOutput, done: StepDone, state: StepState | None, t_start: float,
               t_end: float) -> StepEvent:
        """The step's event (state: the state it shows, taken when its tokens were counted; None: now); what
        ended and what was handed on since the last one go with it."""
        done.finished = self.output.news()
        if self.hand_offs is not None:
            done.handed_off, done.held_for_copy = self.hand_offs.news(), self.hand_offs.kv_tokens
        state = state or self.event_builder.snapshot(sched, self.scheduler)
        return self.event_builder.build(self.step_count, sched, state, done, t_start, t_end)

    # ---- convenience -------------------------------------------------------------------------
    def step_on_cores(self, owner: object, **part) -> StepEvent:
        """One step on `owner`'s share of the CPU cores (engine/cpu_share.py; part: CoreShare.run's group,
        fraction and turns, for a part of a lane); on a GPU, the cores are left to the others."""
        return CORES.run(owner, self.step, **part) if self.runner.device.type == "cpu" else self.step()

    def close(self) -> None:
        """Nothing to stop: this engine steps on its caller's thread (a DisaggregatedEngine has two of its own)."""

    @property
    def kv_pool_bytes(self) -> int:
        """Bytes of the KV pools this engine holds on its device (none once released)."""
        return sum(p.nbytes for p in self._device_pools() if p is not None)

    def release_kv(self) -> list[weakref.ref]:
        """Let go of the KV pools (the model's, a draft model's, swap's host pools) and the draft model, and
        keep the weights, for an engine built to share them (a lane's reconfigure: the new engine is sized on
        the memory this one gave back). Its state stays readable (status, counts); it steps no more. Returns
        weak references to the pools: what still holds one keeps its memory."""
        pools = [weakref.ref(p) for p in self._device_pools() + self.mover.host]
        self.runner.release_kv()
        self.drafter, self.mover = None, BlockMover([], [])
        return pools

    def rest(self) -> None:
        """Nothing to give back: the caller's thread holds this engine's share of the cores."""

    def chat_prompt(self, messages: list[dict], **kwargs) -> list[int]:
        """Token ids of messages under the tokenizer's chat template, ready for add_request."""
        from .detokenizer import apply_chat_template
        return apply_chat_template(self.tokenizer, messages, **kwargs)
