"""The scheduler interface shared by every strategy: schedule() -> SchedulerOutput."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config import EngineConfig
from ..events import DECODE, PREFILL
from ..kv import KVCacheManager
from ..kv.transfer import HANDOFF, SWAP_IN, SWAP_OUT, BlockMove
from ..request import PENDING_TOKEN, Request, RequestStatus
from . import ngram, waits
from .policy import Policy, make_policy

# A draft token the engine's draft model has still to choose (speculative = "draft": the scheduler sizes
# a row's draft, engine/model/draft_model.py fills it in before the forward).
DRAFT_PENDING = -1


@dataclass(slots=True)
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
    num_cached: int = 0   # tokens served from the prefix cache when this row's request was admitted
    # speculative decoding: draft tokens computed after the row's last token (num_new counts them),
    # and how many of them became output (set by Scheduler.update, lowered by unsample)
    draft: list[int] | tuple = ()  # (a shared empty tuple: a step makes hundreds of rows with none)
    accepted: int = 0

    @property
    def samples(self) -> bool:
        r = self.request
        return self.num_new > 0 and r.num_computed_tokens + self.num_new - len(self.draft) == r.num_tokens

    @property
    def num_samples(self) -> int:
        """Tokens sampled for this row: one per position from its last token on (0 if it samples none)."""
        return 1 + len(self.draft) if self.samples else 0


@dataclass
class SchedulerOutput:
    rows: list[ScheduledRow] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    # prefix caching: tokens of the admitted requests looked up in the cache, and found there
    prefix_queries: int = 0
    prefix_hits: int = 0
    # every waiting request -> why it waits after this step (engine/scheduler/waits.py)
    waits: dict[int, dict] = field(default_factory=dict)
    # swap preemption: blocks to copy before the forward, in the order decided (engine/kv/transfer.py)
    moves: list[BlockMove] = field(default_factory=list)
    # the scheduler's clock when it was made (continuous: the slo policy times steps with it); None: not timed
    t_scheduled: float | None = None
    # continuous: this step's token budget (max_num_batched_tokens, or the slo policy's smaller one)
    token_budget: int | None = None

    @property
    def num_tokens(self) -> int:
        return sum(r.num_new + r.num_pad for r in self.rows)


def _accept(row: ScheduledRow, picks: list[int]) -> list[int]:
    """The row's new tokens: its drafts while the model's picks agree, then the model's next pick."""
    if not picks:
        return []
    n = 0
    while n < len(row.draft) and row.draft[n] == picks[n]:
        n += 1
    row.accepted = n
    return picks[:n + 1]


class Scheduler(ABC):
    """Owns the waiting queue, the running set and the requests' lifecycle: every change of a
    request's status, token counts and timings is made here (admit, preempt, update, finish).
    The engine runs the model, turns tokens into text and decides when a request stops."""

    def __init__(self, cfg: EngineConfig, cache: KVCacheManager, clock):
        self.cfg, self.cache, self.clock = cfg, cache, clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.policy = make_policy(cfg)
        # generate() sets this when no more requests will come: launch partial static batches.
        self.draining = False
        self.preempted_why: dict[int, dict] = {}  # a preempted request's reason, until it starts again
        self.dropped: dict[int, int] = {}  # KV tokens a preemption dropped, until the request starts again
        self.recomputed_tokens = 0  # tokens computed again after a preemption dropped them (all requests)
        # the engine launches a step before the one before it settles (EngineConfig.overlap): advance/settle
        self.lookahead = False

    def add(self, request: Request) -> None:
        self.policy.on_add(request)
        self.waiting.append(request)

    def _order_waiting(self) -> None:
        """Put the waiting queue in policy order (fcfs: as it is, not copied twice a step)."""
        if type(self.policy).order is not Policy.order:
            self.waiting = deque(self.policy.order(self.waiting, self.clock()))

    @abstractmethod
    def schedule(self) -> SchedulerOutput: ...

    def update(self, out: SchedulerOutput, tokens: Sequence[int], now: float) -> list[tuple[Request, int]]:
        """Apply one forward pass: every row's tokens are now in the KV cache, and each sampling row
        (in row order) takes its num_samples tokens from `tokens`. A row with a draft keeps the drafts
        its sampled tokens confirm, then the first sampled token that differs (or follows them all);
        the KV of rejected drafts is dropped. Returns (request, token) per new token, in order."""
        it = iter(tokens)
        sampled = []
        if out.t_scheduled is not None:
            self.policy.on_step(out.num_tokens, now - out.t_scheduled)
        # a decode row's update is its counts alone, unless blocks are committed to a prefix cache or the
        # policy tallies what it served
        plain = self.cache.prefix is None and type(self.policy).on_served is Policy.on_served
        for row in out.rows:
            req = row.request
            if req.status is RequestStatus.FINISHED:  # a static padding row, or a row failed this step
                continue
            if plain and row.num_new == 1 and row.phase == DECODE:  # (one token: no draft)
                tok = next(it)
                req.num_computed_tokens += 1
                req.output_token_ids.append(tok)
                if req.first_token_s is None:  # (a request handed over with its first token has it)
                    req.first_token_s = now
                sampled.append((req, tok))
                continue
            self._update_row(row, it, now, sampled)
        return sampled

    def advance(self, out: SchedulerOutput) -> None:
        """Overlap (EngineConfig.overlap): a launched step's tokens count as computed before their values are
        read back, so the next step can be scheduled meanwhile; each row that samples gets a PENDING_TOKEN
        output (settle writes its value). Rows whose request ended since the launch (their forward ran for
        nothing) leave the step. Only for steps without drafts, where update would take the plain path."""
        kept = []
        for row in out.rows:
            req = row.request
            if req.status is RequestStatus.FINISHED:
                continue
            if (row.num_new == 1 and row.phase == DECODE) or row.samples:  # (a plain decode row samples)
                req.output_token_ids.append(PENDING_TOKEN)
            req.num_computed_tokens += row.num_new
            kept.append(row)
        out.rows = kept

    def settle(self, out: SchedulerOutput, rows: list[ScheduledRow], tokens: Sequence[int],
               now: float) -> list[tuple[Request, int]]:
        """Overlap: the values of an advanced step's tokens, read back (`rows`: each token's row): each
        PENDING_TOKEN becomes its token (a request that ended since takes none). update's list."""
        sampled = []
        for row, tok in zip(rows, tokens):
            req = row.request
            if req.status is RequestStatus.FINISHED:
                continue
            if not req.token_pending:
                raise RuntimeError(f"request {req.request_id}: no token pending where step tokens settle")
            req.output_token_ids[-1] = tok
            if req.first_token_s is None:
                req.first_token_s = now
            sampled.append((req, tok))
        if self.cache.prefix is not None:  # full blocks now have their tokens' hashes (preempted since: later)
            for row in out.rows:
                if row.request.status is RequestStatus.RUNNING:
                    self.cache.commit(row.request)
        return sampled

    def _update_row(self, row: ScheduledRow, it, now: float, sampled: list) -> None:
        req = row.request
        if row.draft:  # read before the count moves
            new = _accept(row, [next(it) for _ in range(row.num_samples)])
        else:
            new = [next(it)] if row.samples else []
        self.policy.on_served(req, row.num_new if row.phase == PREFILL else 0, len(new))
        req.num_computed_tokens += row.num_new - len(row.draft) + row.accepted
        req.output_token_ids.extend(new)  # before commit: accepted drafts are in full blocks' hashes
        if row.draft:
            self._drop_rejected(req)
        self.cache.commit(req)
        if new and req.first_token_s is None:
            req.first_token_s = now
        sampled.extend((req, tok) for tok in new)

    def _draft(self, row: ScheduledRow, spare: int) -> None:
        """Speculative decoding: a decode row drafts up to num_speculative_tokens, `spare` and the tokens
        it may still make; fewer when the free blocks do not hold them all. An n-gram draft is known
        here; a draft model's is sized here (DRAFT_PENDING) and chosen by the engine."""
        req = row.request
        if row.phase != DECODE:
            return
        k = max(0, min(self.cfg.num_speculative_tokens, spare, req.params.max_tokens - len(req.output_token_ids) - 1))
        draft = [DRAFT_PENDING] * k if self.cfg.speculative == "draft" else ngram.propose(req.all_token_ids, k)
        while draft and not self.cache.allocate(req.request_id, req.num_computed_tokens + 1 + len(draft)):
            draft.pop()
        row.draft, row.num_new = draft, 1 + len(draft)

    def _drop_rejected(self, request: Request) -> None:
        """The blocks past the request's accepted tokens go back (held only rejected drafts)."""
        self.cache.trim(request.request_id, request.num_computed_tokens)

    def unsample(self, out: SchedulerOutput, request: Request, num_tokens: int) -> None:
        """Drop the last num_tokens output tokens: made in step `out`, which stopped the request, after
        the token it stopped at (drafts accepted past a stop); they no longer count as accepted. The
        request is finishing."""
        if num_tokens:
            del request.output_token_ids[-num_tokens:]
            next(r for r in out.rows if r.request is request and r.draft).accepted -= num_tokens

    def finish(self, request: Request, reason: str, now: float, error: str | None = None) -> None:
        """End a request (stop, length, abort or error) and release what it holds."""
        request.status = RequestStatus.FINISHED
        request.finish_reason, request.finish_s, request.error = reason, now, error
        if request.token_pending:  # ended mid-step
            request.output_token_ids.pop()
        self.policy.on_finish(request)
        self._release(request)

    def detach(self, request: Request) -> None:
        """Hand a running request on to another engine (a disaggregated lane's decode half): it leaves
        the running set and the policy; its blocks stay held until they are copied there."""
        self.running.remove(request)
        self.policy.on_finish(request)
        request.status = RequestStatus.WAITING

    @abstractmethod
    def _release(self, request: Request) -> None:
        """A request just finished: drop it from the queues and free its KV (as the strategy says)."""

    def on_step_done(self) -> None:
        """Called after every step's update."""

    def remove_waiting(self, request: Request) -> bool:
        self.preempted_why.pop(request.request_id, None)
        self.dropped.pop(request.request_id, None)
        try:
            self.waiting.remove(request)
            return True
        except ValueError:
            return False

    def _explain(self, out: SchedulerOutput, head: dict | None, rest: dict | None = None) -> None:
        """Every waiting request's reason at this step: a preempted one's preemption; the head's, why the
        queue stopped there; the others', `rest`, or their place behind the head in the policy's order
        (exact in the first waits.QUEUE_SHOWN, then one reason shared by all further back)."""
        queue = self.waiting
        aged = queue and out.t_scheduled is not None and self.policy.why_first(queue[0], out.t_scheduled)
        order = aged or waits.ORDER.get(self.cfg.scheduling_policy, self.cfg.scheduling_policy)
        deep = waits.queued(waits.QUEUE_SHOWN, order)
        for rank, req in enumerate(queue, 1):
            why = self.preempted_why.get(req.request_id) or (head if rank == 1 else rest)
            out.waits[req.request_id] = why or (
                waits.behind(queue[0].request_id, rank, len(queue), order) if rank <= waits.QUEUE_SHOWN else deep)

    def _kv_short(self, req: Request, cached: list[int], num_tokens: int) -> dict:
        """req cannot start on `cached` with num_tokens more: how many blocks it needs, how many are free."""
        hit = len(cached) * self.cache.block_size
        need = self.cache.blocks_to_start(req.num_computed_tokens + hit + num_tokens, cached)
        return waits.kv_blocks(need, self.cache.num_free)

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

    def _cached_prefix(self, request: Request) -> list[int]:
        """Blocks of the prefix cache holding a request's leading tokens, when it starts from scratch (not
        while its last token is pending: preempted by this step, it is hashed once that token is known)."""
        if request.num_computed_tokens or request.token_pending:
            return []
        return self.cache.match(request)

    def _start(self, out: SchedulerOutput, request: Request, cached: list[int], num_tokens: int) -> bool:
        """Start a waiting request on its cached prefix blocks, with KV for num_tokens more tokens after
        them; False (and nothing changed) when the blocks do not fit."""
        hit = len(cached) * self.cache.block_size
        # from scratch (new, or recomputing): it looked its tokens up in the prefix cache; a swapped-out or
        # handed-over request brings its KV instead
        fresh = request.num_computed_tokens == 0
        if not self._claim_blocks(out, request, cached, hit + num_tokens):
            return False
        request.status = RequestStatus.RUNNING
        self.preempted_why.pop(request.request_id, None)
        self.recomputed_tokens += max(0, self.dropped.pop(request.request_id, 0) - hit)
        request.num_computed_tokens += hit
        if request.num_preemptions == 0 and fresh:  # a resumed request's hit may cover output: not prompt tokens
            request.num_cached_tokens = min(hit, len(request.prompt_token_ids))
        request.num_committed_blocks = len(cached)
        out.admitted.append(request.request_id)
        if self.cache.prefix is not None and fresh:
            out.prefix_queries += request.num_tokens
            out.prefix_hits += hit
        return True

    def _claim_blocks(self, out: SchedulerOutput, request: Request, cached: list[int], num_tokens: int) -> bool:
        """Device blocks for num_tokens more of request: after its cached prefix, or after its swapped-out
        blocks or the blocks a prefill engine handed over, which come here (copied before the forward)."""
        rid, total = request.request_id, request.num_computed_tokens + num_tokens
        if rid in self.cache.host_tables:
            moved, direction = self.cache.swap_in(rid, total), SWAP_IN
        elif rid in self.cache.incoming:
            moved, direction = self.cache.take_incoming(rid, total), HANDOFF
        else:
            return self.cache.allocate(rid, total, cached)
        if moved is None:
            return False
        out.moves.append(BlockMove(direction, rid, *moved))
        request.num_committed_blocks = 0  # fresh blocks: cached again as commit() finds them full
        return True

    def _preempt(self, out: SchedulerOutput, request: Request, why: dict) -> None:
        """Take the request's KV off the device and queue it first: swapped out to the host pool (it
        resumes where it was), or dropped (it recomputes prompt + output so far). The reason says which."""
        rid = request.request_id
        moved = self.cache.swap_out(rid, request.num_computed_tokens) if self.cfg.preemption_mode == "swap" else None
        if moved is not None:
            out.moves.append(BlockMove(SWAP_OUT, rid, *moved))
            why = {**why, "kv": waits.SWAPPED}
        else:
            full = self.cfg.preemption_mode == "swap" and request.num_computed_tokens > 0
            why = {**why, "kv": waits.DROPPED_HOST_FULL if full else waits.DROPPED}
            self.dropped[rid] = request.num_computed_tokens
            self.cache.free(rid)
            request.num_computed_tokens = 0
        self.preempted_why[rid] = why
        request.num_preemptions += 1
        request.status = RequestStatus.WAITING
        self.waiting.appendleft(request)
