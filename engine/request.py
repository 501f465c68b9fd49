"""Requests as the engine sees them, and what it hands back."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .untrusted import INT64, integer, is_int, is_number, shown, text

FinishReason = str  # "stop" | "length" | "abort" | "error"
PRIORITY_RANGE = (-1000, 1000)  # lower runs first (scheduling_policy="priority")
MAX_TENANT_CHARS = 64
MAX_STOPS = 16          # stop strings, and stop token ids, per request
MAX_STOP_CHARS = 200


@dataclass
class SamplingParams:
    """How one request samples and when it stops.

    temperature 0 is greedy; top_k 0 and top_p 1.0 disable those filters.
    """
    max_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the first field that is out of range."""
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {shown(self.max_tokens)}")
        if not is_number(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {shown(self.temperature)}")
        if not is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {shown(self.top_p)}")
        if not is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {shown(self.top_k)}")
        if self.seed is not None:
            integer(self.seed, "seed", *INT64)
        self.stop_strings()  # validates the stop field
        if self.stop_token_ids is not None and not (
                isinstance(self.stop_token_ids, (list, tuple)) and len(self.stop_token_ids) <= MAX_STOPS
                and all(is_int(t) for t in self.stop_token_ids)):
            raise ValueError(f"stop_token_ids must be a list of at most {MAX_STOPS} integers, "
                             f"got {shown(self.stop_token_ids)}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be true or false, got {shown(self.ignore_eos)}")

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        if not isinstance(stops, (list, tuple)) or len(stops) > MAX_STOPS:
            raise ValueError(f"stop must be a string or a list of at most {MAX_STOPS} strings, got {shown(self.stop)}")
        if any(s == "" for s in stops):
            raise ValueError("stop strings must not be empty")
        return [text(s, "stop", MAX_STOP_CHARS, empty=True) for s in stops]  # "\n" is a fine stop

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def check_priority_tenant(priority, tenant) -> None:
    """Raise ValueError if priority is not an integer in PRIORITY_RANGE or tenant not a short string."""
    lo, hi = PRIORITY_RANGE
    if not is_int(priority) or not lo <= priority <= hi:
        raise ValueError(f"priority must be an integer from {lo} to {hi} (lower runs first), got {shown(priority)}")
    if tenant is not None and not (isinstance(tenant, str) and 0 < len(tenant) <= MAX_TENANT_CHARS):
        raise ValueError(f"tenant must be a string of 1 to {MAX_TENANT_CHARS} characters or None, got {shown(tenant)}")
    if tenant is not None:
        text(tenant, "tenant", MAX_TENANT_CHARS, empty=True)


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class RequestOutput:
    """A request's result so far (finish_reason is None while it runs)."""
    request_id: int
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    text: str
    finish_reason: FinishReason | None
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    error: str | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache at its first admission
    answer_end: int | None = None  # see Request.answer_end

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


# An output token sampled on the device and not yet read back (EngineConfig.overlap): counted in the
# request's tokens at once, its value written when the step that sampled it settles (Scheduler.settle).
PENDING_TOKEN = -2  # (not -1: no other placeholder of a token is this)


@dataclass(eq=False)  # one request is one object: the queues find it by identity, not by comparing every field
class Request:
    """Mutable per-request state. Its lifecycle (status, token counts, timings, finish) is changed
    only by the scheduler; the engine adds the text (detokenizer) and decides when it stops."""
    request_id: int
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_s: float
    eos_token_ids: frozenset[int] = frozenset()
    priority: int = 0            # lower runs first under the priority policy
    tenant: str | None = None    # whose request: the fair policy shares tokens between tenants
    output_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    # Tokens whose K/V are in the cache. Preemption resets it; the request then
    # recomputes prompt + output so far.
    num_computed_tokens: int = 0
    # Prefix caching: prompt tokens served from the cache at its latest admission, the hashes of its
    # full blocks so far, and how many of its leading blocks are in the cache's index.
    num_cached_tokens: int = 0
    block_hashes: list[bytes] = field(default_factory=list)
    num_committed_blocks: int = 0
    text: str = ""
    finish_reason: FinishReason | None = None
    error: str | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0
    generator: object | None = None  # torch.Generator when seeded
    detok: object | None = None      # engine.detokenizer.detokenizer_for's
    stops: list[str] = field(default_factory=list)  # params.stop_strings(), checked once when it was made
    # ignore_eos: the length of `text` (in characters) when the model sampled its end-of-text token, the
    # end of its own answer; what follows it is the model going on (it may read as a new turn, "system").
    answer_end: int | None = None
    # the tokens that may end it: end of text and its params' stop tokens (one lookup a token, to see
    # whether its stop needs a closer look)
    ends: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        self.ends = self.eos_token_ids | frozenset(self.params.stop_token_ids or ())

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    @property
    def token_pending(self) -> bool:
        """Its last output token is sampled on the device and not yet read back (EngineConfig.overlap)."""
        return bool(self.output_token_ids) and self.output_token_ids[-1] == PENDING_TOKEN

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt_token_ids) + self.params.max_tokens

    def to_output(self) -> RequestOutput:
        return RequestOutput(
            request_id=self.request_id,
            prompt_token_ids=list(self.prompt_token_ids),
            output_token_ids=self.output_token_ids[:-1] if self.token_pending else list(self.output_token_ids),
            text=self.text,
            finish_reason=self.finish_reason,
            arrival_s=self.arrival_s,
            first_token_s=self.first_token_s,
            finish_s=self.finish_s,
            error=self.error,
            num_preemptions=self.num_preemptions,
            num_cached_tokens=self.num_cached_tokens,
            answer_end=self.answer_end,
        )
