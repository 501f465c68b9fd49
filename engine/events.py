"""The event contract: every event /engine/ws carries, and the step event inside each step message.

Events are dataclasses whose `to_dict()` is the wire shape ({"type": ..., fields...}). The fields every
event carries (lane, strategy) live on `Event`: adding one there adds it to every event. A step entry
travels as a list in ENTRY_FIELDS order; `wire_contract()` hands that order and the phase names to
the browser, so no client hard-codes them.

Remote lanes (engine/serving/remote/lane.py: a lane served by an OpenAI-compatible server elsewhere) emit the
same events, built from timestamps taken here, at the client: sent, each streamed chunk, finished.
They are labelled: every event of such a lane carries strategy REMOTE, and its config in `lanes` and
in status carries `source: REMOTE`. What they mean there:
- `request`: num_prompt_tokens is None unless the prompt was given as token ids (the server counts).
- `step`: one per tick (at most every 50 ms) in which chunks arrived. A request is queued until its
  first chunk (the server's own queueing and prefill are not visible from outside); the tick that
  brings its first chunk carries it as a prefill entry, later ticks as decode entries whose
  num_tokens is the chunks received (0 while it waits). slot is -1, there is no KV (0 blocks),
  token_budget is 0 and `sampled` is empty: a remote server streams text, not token ids.
- `finished`: the token counts are the server's usage when it reports it, else the chunks counted.
- `remote_metrics`: the server's own gauges, polled from its /metrics.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from .kv_wire import ENTRY_CTX, SHORT_CTX, KvBase, change_fields, key_fields
from .wire_json import dumps

if TYPE_CHECKING:
    from .request import RequestOutput

# Phases of a scheduled row.
PREFILL = "prefill"  # a prompt chunk, or a recompute after preemption
DECODE = "decode"    # one new token
PADDING = "padding"  # computed but discarded: static batching's pad tokens and finished rows still in the batch
PHASES = (PREFILL, DECODE, PADDING)
# swap preemption's copies (StepEvent.swaps, engine/kv/transfer.py)
SWAP_OUT = "out"  # device pool -> host pool
SWAP_IN = "in"    # host pool -> device pool
HANDOFF = "handoff"  # a disaggregated lane: the prefill engine's pool -> the decode engine's (StepEvent.handoffs)
# which half of a disaggregated lane stepped (StepEvent.part; None: a lane of one engine)
PREFILL_PART, DECODE_PART = "prefill", "decode"
REMOTE = "remote"    # the strategy of a remote lane's events, and the `source` of its config
# Status events the views and metrics act on: the service paused / resumed (latencies leave paused
# time out), and a run began (a scenario's stream: metric cards start afresh, its title in `message`).
PAUSED, RESUMED, RUN_STARTED = "paused", "resumed", "run_started"


@dataclass(slots=True)
class StepEntry:
    """One scheduled row of a step. context_len: tokens in this request's KV cache after the step."""
    request_id: int
    phase: str
    num_tokens: int
    context_len: int
    slot: int = -1  # static/dynamic: the row in the launched batch; continuous: position in the batch
    # Tokens served from the prefix cache when this step admitted the request (its prefill skipped
    # them: num_tokens leaves them out, context_len counts them); 0 on every other entry.
    cached_tokens: int = 0
    # Speculative decoding: draft tokens this row brought (num_tokens counts them), and how many of them
    # became output (its tokens gained this step: accepted + 1); 0 on every other entry.
    drafted: int = 0
    accepted: int = 0

    def to_list(self) -> list:
        return list(_entry_values(self))


ENTRY_FIELDS = tuple(f.name for f in fields(StepEntry))  # the order of a step entry's list on the wire
_entry_values = attrgetter(*ENTRY_FIELDS)
# A plain decode row (phase decode, one token, nothing cached, drafted or accepted, its slot its place in the
# list) travels as [request_id, context_len]: most of a step's rows at a GPU's batch sizes, ~11 bytes of JSON
# instead of ~30. full_entries writes them out again.
SHORT_ENTRY = ("request_id", "context_len")


def wire_entry(e: StepEntry, index: int) -> list:
    """Entry `index` of a step as it goes on the wire: short where it is a plain decode row (SHORT_ENTRY)."""
    if e.phase == DECODE and e.num_tokens == 1 and e.slot == index and not (e.cached_tokens or e.drafted or e.accepted):
        return [e.request_id, e.context_len]
    return e.to_list()


def continued_rows(prev, entries: list[list]) -> tuple[list[list], list[list[int]]]:
    """A step's wire entries as sent beside the previous step of its pool (prev: its rows' (request_id,
    context_len)): the short ones that go on from a row there (its context_len one more) as runs [at, from,
    n] (this step's entries at..at+n-1 are prev's from..from+n-1, each a token further), and the others in
    order. At a GPU's batch sizes most rows of most steps go on, and a run of them is a few bytes instead of
    ~11 a row (nor does a context that grows by one each step compress)."""
    where = {rid: (j, ctx) for j, (rid, ctx) in enumerate(prev)}
    rest, runs = [], []
    for i, e in enumerate(entries):
        hit = where.get(e[0]) if len(e) == len(SHORT_ENTRY) else None
        if hit is None or hit[1] + 1 != e[1]:
            rest.append(e)
        elif runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == hit[0]:
            runs[-1][2] += 1
        else:
            runs.append([i, hit[0], 1])
    return rest, runs


def with_continued_rows(prev: list[list] | None, step: dict) -> list[list] | None:
    """A wire step's entries as sent whole: its `cont` runs written out from `prev`, the entries of its
    pool's previous step (as this returned them). None: it has runs and prev is not known (a reader that
    missed events has it whole again from the pool's next key frame). Runs past prev's rows are ignored,
    and a step never holds more rows than prev and its own entries (each of prev's goes on at most once)."""
    runs, explicit = step.get("cont"), step.get("entries") or []
    if not runs:
        return explicit
    if prev is None:
        return None
    out, k, room = [], 0, len(prev)
    for at, start, n in runs:
        take = min(max(0, at - len(out)), len(explicit) - k)
        out += explicit[k:k + take]
        k += take
        went_on = prev[max(0, start):max(0, start + min(n, room))]
        room -= len(went_on)
        out += [[rid, ctx + 1] for rid, ctx in map(row_context, went_on)]
    return out + explicit[k:]


def row_context(entry: list) -> tuple[int, int]:
    """A wire entry's (request_id, context_len), short or not."""
    return entry[0], entry[SHORT_CTX if len(entry) == len(SHORT_ENTRY) else ENTRY_CTX]


class StepRows:
    """A reader's last step entries of each pool (a lane, or one half of a disaggregated lane), to write out
    the continued rows of the wire steps it reads in order."""

    def __init__(self):
        self._last: dict[tuple, list[list] | None] = {}

    def resolve(self, step: dict) -> dict | None:
        """The step with its entries whole (`cont` written out); None where they cannot be (see
        with_continued_rows)."""
        pool = (step.get("lane"), step.get("part"))
        entries = self._last[pool] = with_continued_rows(self._last.get(pool), step)
        if entries is None:
            return None
        return step if "cont" not in step else {**{k: v for k, v in step.items() if k != "cont"}, "entries": entries}


def full_entries(entries) -> list[list]:
    """A wire step's entries, each a list in ENTRY_FIELDS order (short ones written out)."""
    return [_written_out(e, i) if len(e) == len(SHORT_ENTRY) else e for i, e in enumerate(entries)]


def sampled_ids(step: dict) -> list[int]:
    """The requests a wire step sampled for: its short entries' but those `unsampled`, then `sampled`'s (older
    recordings, without `unsampled`: all in `sampled`, as ids or an object of id -> token id)."""
    listed = [int(r) for r in step.get("sampled") or ()]
    if "unsampled" not in step:
        return listed
    skip = set(step["unsampled"])
    return [e[0] for e in step["entries"] if len(e) == len(SHORT_ENTRY) and e[0] not in skip] + listed


def _written_out(short: list, index: int) -> list:
    return StepEntry(short[0], DECODE, 1, short[1], index).to_list()


@dataclass
class StepEvent:
    step: int  # the iteration number: steps that computed or finished something, from 1 (LLMEngine.step)
    strategy: str
    t_start: float
    t_end: float
    entries: list[StepEntry]
    num_waiting: int
    num_running: int
    admitted: list[int]
    finished: list[int]
    preempted: list[int]
    tokens_used: int            # tokens computed this step (padding included)
    token_budget: int
    # KV cache
    num_blocks: int
    block_size: int
    used_blocks: int
    block_tables: dict[int, list[int]]  # request id -> physical block ids (every held block is in one)
    kv_tokens: dict[int, int]   # request id -> tokens stored in its blocks
    reserved_unused_slots: int  # slots held by requests but holding no token
    # new tokens sampled this step: request id -> token id
    sampled: dict[int, int] = field(default_factory=dict)
    # prefix caching: evictable cached blocks (held by nobody, least recently used first), and the
    # tokens of this step's admitted requests looked up in the cache and found there
    cached_blocks: list[int] = field(default_factory=list)
    prefix_queries: int = 0
    prefix_hits: int = 0
    # why requests wait (engine/scheduler/waits.py), as changes since the previous step: request id ->
    # its reason, or None once it no longer waits
    waits: dict[int, dict | None] = field(default_factory=dict)
    # swap preemption (num_host_blocks > 0): this step's copies as [request id, "out" | "in", blocks], in
    # order, their bytes and seconds, and the host pool's tables (request id -> host block ids)
    swaps: list[list] = field(default_factory=list)
    swap_bytes: int = 0
    swap_s: float = 0.0
    num_host_blocks: int = 0
    host_tables: dict[int, list[int]] = field(default_factory=dict)
    host_same_ram: bool = False  # the device pool is in host RAM too (a CPU device): a swap is a memory copy
    # a disaggregated lane (engine/disaggregated.py): the half that stepped; on its prefill half, the
    # requests whose first token this step sampled and that now go to the decode half (their blocks
    # held until copied); on its decode half, this step's copies out of the prefill pool as
    # [request id, blocks, bytes, seconds] (each one timed)
    part: str | None = None
    handed_off: list[int] = field(default_factory=list)
    handoffs: list[list] = field(default_factory=list)
    # requests whose model sampled its end-of-text token this step while ignore_eos kept them going:
    # request id -> the length of its text (characters) there, the end of its own answer
    answer_ends: dict[int, int] = field(default_factory=dict)
    # the previous step event's KV of the same engine: the wire sends the changes since it (None: this
    # event is a key frame and sends its tables whole; engine/kv_wire.py)
    kv_base: KvBase | None = None

    def block_holders(self) -> dict[int, list[int]]:
        """Block -> the requests holding it (more than one when prefix caching shares it): the block
        tables' inverse, derived on demand so that a step pays nothing for it."""
        holders: dict[int, list[int]] = {}
        for rid, table in self.block_tables.items():
            for b in table:
                holders.setdefault(b, []).append(rid)
        return holders

    @property
    def shared_blocks(self) -> dict[int, int]:
        """Block -> reference count, for the blocks more than one request holds (prefix caching)."""
        return {b: len(rids) for b, rids in self.block_holders().items() if len(rids) > 1}

    @property
    def duration_s(self) -> float:
        return self.t_end - self.t_start

    @property
    def num_padding_tokens(self) -> int:
        return sum(e.num_tokens for e in self.entries if e.phase == PADDING)

    def to_dict(self, key: bool = False) -> dict:
        """Compact JSON-ready form (the websocket's shape); key: with the tables and rows whole even where
        the event is not a key frame."""
        entries = [wire_entry(e, i) for i, e in enumerate(self.entries)]
        return {
            "type": StepMessage.TYPE,
            "step": self.step,
            "strategy": self.strategy,
            "t_start": self.t_start,
            "t_end": self.t_end,
            **self._rows_dict(entries, key),
            "num_waiting": self.num_waiting,
            "num_running": self.num_running,
            "admitted": self.admitted,
            "finished": self.finished,
            "preempted": self.preempted,
            "tokens_used": self.tokens_used,
            "token_budget": self.token_budget,
            "kv": self.kv_dict(key),
            "prefix_queries": self.prefix_queries,
            "prefix_hits": self.prefix_hits,
            **self._sampled_dict(entries),
            "waits": {str(k): v for k, v in self.waits.items()},
            **self._swap_dict(),
            **self._part_dict(),
            **({"answer_ends": {str(k): v for k, v in self.answer_ends.items()}} if self.answer_ends else {}),
        }

    def _rows_dict(self, entries: list[list], key: bool) -> dict:
        """`entries` whole (a key frame), or the rows that do not go on from the pool's previous step with
        `cont` the runs of those that do (continued_rows)."""
        if key or self.kv_base is None:
            return {"entries": entries}
        rest, runs = continued_rows(((e.request_id, e.context_len) for e in self.kv_base.entries), entries)
        return {"entries": rest, "cont": runs} if runs else {"entries": entries}

    def _sampled_dict(self, entries: list[list]) -> dict:
        """The requests sampled for, relative to the short entries (plain decode rows), which mostly all
        sample: `sampled` the others (ids alone: no view reads a token id), `unsampled` the short ones that
        did not (a failed step)."""
        short = [e[0] for e in entries if len(e) == len(SHORT_ENTRY)]
        shorts = set(short)
        return {"sampled": [r for r in self.sampled if r not in shorts],
                "unsampled": [r for r in short if r not in self.sampled]}

    def kv_dict(self, key: bool = False) -> dict:
        """The wire's `kv`: the tables whole (key, or a key frame) or their changes since kv_base."""
        state = (self.block_tables, self.kv_tokens, self.cached_blocks)
        return {"num_blocks": self.num_blocks, "block_size": self.block_size, "used": self.used_blocks,
                "reserved_unused_slots": self.reserved_unused_slots,
                **(key_fields(*state) if key or self.kv_base is None else
                   change_fields(self.kv_base, *state, ((e.request_id, e.context_len) for e in self.entries)))}

    def _part_dict(self) -> dict:
        """A disaggregated lane's fields, sent only by its halves."""
        if self.part is None:
            return {}
        return {"part": self.part, "handed_off": self.handed_off, "handoffs": self.handoffs}

    def _swap_dict(self) -> dict:
        """Swap preemption's fields, sent only by an engine that has a host pool."""
        if not self.num_host_blocks:
            return {}
        return {"swaps": self.swaps, "swap_bytes": self.swap_bytes, "swap_s": self.swap_s,
                "host": {"num_blocks": self.num_host_blocks, "same_ram": self.host_same_ram,
                         "block_tables": {str(k): v for k, v in self.host_tables.items()}}}


@dataclass(kw_only=True)
class Event:
    """What every event carries besides its own fields."""
    TYPE: ClassVar[str] = ""
    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # own fields left off the wire while None
    lane: str | None = None      # the lane that sent it; None (not sent): the service as a whole
    strategy: str | None = None  # that lane's batching strategy

    def to_dict(self) -> dict:
        out = {"type": self.TYPE}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None or not _optional(self, f.name):
                out[f.name] = value
        return out

    def source(self) -> dict:
        """The common fields (who sent it), as sent."""
        return {f.name: getattr(self, f.name) for f in fields(Event) if getattr(self, f.name) is not None}

    @property
    def is_remote(self) -> bool:
        """Sent by a remote lane (its numbers are times taken here, at the client)."""
        return self.strategy == REMOTE

    # The hub holds the event itself; its wire forms are built on first use and kept, so that every
    # client of the socket, the recorder and the trace share one encoding. Events are not changed once
    # published, and neither is what wire() returns. The JSON text does not keep the dict it was made
    # from: a hub's ring of thousands of step events then holds their text, not hundreds of lists an
    # event for every full collection to walk (engine/gc_pauses.py).
    def wire(self) -> dict:
        """The JSON-ready dict the socket sends."""
        out = self.__dict__.get("_wire")
        if out is None:
            out = self.__dict__["_wire"] = self.to_dict()
        return out

    def json(self) -> str:
        """The wire dict as JSON text (wire_json: this cannot fail)."""
        out = self.__dict__.get("_json")
        if out is None:
            out = self.__dict__["_json"] = dumps(self.__dict__.get("_wire") or self.to_dict())
        return out


def _optional(event: Event, name: str) -> bool:
    return name in event.OPTIONAL or any(name == f.name for f in fields(Event))


@dataclass(kw_only=True)
class StepMessage(Event):
    """One engine iteration plus the text it added per request (request id -> new text)."""
    TYPE: ClassVar[str] = "step"
    event: StepEvent
    deltas: dict[int, str] = field(default_factory=dict)
    roofline: dict | None = None  # engine/telemetry/roofline.py step_roofline(); sent only when known

    def to_dict(self, key: bool = False) -> dict:
        extra = {} if self.roofline is None else {"roofline": self.roofline}
        return {**self.event.to_dict(key), **self.source(), "deltas": {str(k): v for k, v in self.deltas.items()},
                **extra}

    # ---- its KV for a reader that needs a key frame (engine/kv_wire.py KvSync) ----------------------
    @property
    def kv_pool(self) -> tuple:
        return self.lane, self.event.part

    @property
    def kv_is_key(self) -> bool:
        return self.event.kv_base is None

    can_key = True  # a live event holds its tables whole

    def key_wire(self) -> dict:
        """The wire dict with the tables whole (built on first use and kept, like wire(): the same dict
        but for its KV)."""
        if self.kv_is_key:
            return self.wire()
        out = self.__dict__.get("_key_wire")
        if out is None:
            out = self.__dict__["_key_wire"] = self._key_dict()
        return out

    def _key_dict(self) -> dict:
        """The wire dict with the tables and rows whole, from the wire dict where a reader had it built (as
        json())."""
        wire = self.__dict__.get("_wire") or self.to_dict()
        if "cont" in wire:  # (its rows whole too)
            wire = {**{k: v for k, v in wire.items() if k != "cont"},
                    "entries": [wire_entry(e, i) for i, e in enumerate(self.event.entries)]}
        return {**wire, "kv": self.event.kv_dict(key=True)}

    def key_json(self) -> str:
        if self.kv_is_key:
            return self.json()
        out = self.__dict__.get("_key_json")
        if out is None:  # (the dict kept only where a reader asked for it, as json())
            out = self.__dict__["_key_json"] = dumps(self.__dict__.get("_key_wire") or self._key_dict())
        return out


@dataclass(kw_only=True)
class RequestEvent(Event):
    """A request was accepted."""
    TYPE: ClassVar[str] = "request"
    request_id: int
    tag: str
    prompt: str | None  # None when given as token ids or chat messages
    messages: list | None
    num_prompt_tokens: int | None  # None: not known yet (a remote lane's text prompt)
    max_tokens: int
    arrival_s: float
    priority: int = 0           # lower runs first under the priority policy
    tenant: str | None = None   # whose request (the fair policy); None: no tenant named
    name: str | None = None     # the participant who sent it through /join (plain text); None: not named


@dataclass(kw_only=True)
class FinishedEvent(Event):
    """A request ended (finished, aborted or failed), with its final text."""
    TYPE: ClassVar[str] = "finished"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("answer_end",)
    request_id: int
    finish_reason: str
    error: str | None
    text: str
    num_prompt_tokens: int
    num_output_tokens: int
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    answer_end: int | None = None  # ignore_eos: where the model ended its own answer (characters of text)

    @classmethod
    def of(cls, out: RequestOutput) -> FinishedEvent:
        return cls(request_id=out.request_id, finish_reason=out.finish_reason, error=out.error, text=out.text,
                   num_prompt_tokens=len(out.prompt_token_ids), num_output_tokens=len(out.output_token_ids),
                   arrival_s=out.arrival_s, first_token_s=out.first_token_s, finish_s=out.finish_s,
                   num_cached_tokens=out.num_cached_tokens, answer_end=out.answer_end)


@dataclass(kw_only=True)
class StatusEvent(Event):
    """Something happened to an engine or the service: ready, load_error, paused, progress, ..."""
    TYPE: ClassVar[str] = "status"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("t", "error", "message")
    event: str
    t: float | None = None
    error: str | None = None
    message: str | None = None


@dataclass(kw_only=True)
class WaitsEvent(Event):
    """Why requests wait changed while the lane computed nothing (a static batch filling up): the same
    changes a step event carries in `waits` (engine/scheduler/waits.py), at service time t."""
    TYPE: ClassVar[str] = "waits"
    t: float
    waits: dict[str, dict[str, Any] | None]


@dataclass(kw_only=True)
class GpuEvent(Event):
    """One NVML sample of the device the engines share."""
    TYPE: ClassVar[str] = "gpu"
    t: float
    util_pct: float
    mem_used_mb: float
    mem_total_mb: float


@dataclass(kw_only=True)
class LanesEvent(Event):
    """The lanes now running: name -> its configuration (a remote lane's has `source: "remote"`,
    its URL and model, and never its API key)."""
    TYPE: ClassVar[str] = "lanes"
    lanes: dict[str, dict[str, Any]]



def is_remote_lane(settings: dict) -> bool:
    """A lane's settings as a `lanes` event carries them: is it a remote server's?"""
    return settings.get("source") == REMOTE

@dataclass(kw_only=True)
class RemoteMetricsEvent(Event):
    """A remote lane's server's own gauges, read from its Prometheus /metrics (vLLM or SGLang names),
    summed over its engines (KV usage: their mean). None: the server does not export that one."""
    TYPE: ClassVar[str] = "remote_metrics"
    t: float
    num_running: float | None
    num_waiting: float | None
    kv_usage: float | None  # 0-1


EVENTS = (StepMessage, RequestEvent, FinishedEvent, StatusEvent, WaitsEvent, GpuEvent, LanesEvent,
          RemoteMetricsEvent)


def wire_contract() -> dict:
    """What a client needs to read events without hard-coding them (the live view gets this), the
    phrasing of each wait reason included."""
    from .scheduler.waits import LAUNCH_AT, TEMPLATES  # the scheduler imports this module
    return {"entry_fields": list(ENTRY_FIELDS), "short_entry": list(SHORT_ENTRY), "phases": list(PHASES),
            "event_types": [e.TYPE for e in EVENTS],
            "types": {e.__name__: e.TYPE for e in EVENTS},  # each event's type name, by its class here
            "remote_strategy": REMOTE, "wait_reasons": TEMPLATES, "launch_at": LAUNCH_AT,
            "status": {"paused": PAUSED, "resumed": RESUMED, "run_started": RUN_STARTED},
            "swap": {"out": SWAP_OUT, "in": SWAP_IN},  # a step's swaps: [request id, direction, blocks]
            "parts": {"prefill": PREFILL_PART, "decode": DECODE_PART}}  # a disaggregated lane's halves
