"""The event contract: every event /engine/ws carries, defined once.

Events are dataclasses whose `to_dict()` is the wire shape ({"type": ..., fields...}). The fields every
event carries (lane, strategy) live on `Event`: adding one there adds it to every event. A step entry
travels as a list in ENTRY_FIELDS order; `wire_contract()` hands that order and the phase names to
the browser, so no client hard-codes them.

Remote lanes (engine/remote_lane.py: a lane served by an OpenAI-compatible server elsewhere) emit the
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

if TYPE_CHECKING:
    from .request import RequestOutput
    from .telemetry import StepEvent

# Phases of a scheduled row.
PREFILL = "prefill"  # a prompt chunk, or a recompute after preemption
DECODE = "decode"    # one new token
PADDING = "padding"  # computed but discarded: static batching's pad tokens and finished rows still in the batch
PHASES = (PREFILL, DECODE, PADDING)
REMOTE = "remote"    # the strategy of a remote lane's events, and the `source` of its config
# Status events the views and metrics act on: the service paused / resumed (latencies leave paused
# time out), and a run began (a scenario's stream: metric cards start afresh, its title in `message`).
PAUSED, RESUMED, RUN_STARTED = "paused", "resumed", "run_started"


@dataclass
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

    def to_list(self) -> list:
        return list(_entry_values(self))


ENTRY_FIELDS = tuple(f.name for f in fields(StepEntry))  # the order of a step entry's list on the wire
_entry_values = attrgetter(*ENTRY_FIELDS)


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

    def hub_item(self) -> dict:
        """What the EventHub holds: the wire dict."""
        return self.to_dict()


def _optional(event: Event, name: str) -> bool:
    return name in event.OPTIONAL or any(name == f.name for f in fields(Event))


@dataclass(kw_only=True)
class StepMessage(Event):
    """One engine iteration plus the text it added per request (request id -> new text)."""
    TYPE: ClassVar[str] = "step"
    event: StepEvent
    deltas: dict[int, str] = field(default_factory=dict)
    roofline: dict | None = None  # engine/roofline.py step_roofline(); sent only when known

    def to_dict(self) -> dict:
        extra = {} if self.roofline is None else {"roofline": self.roofline}
        return {**self.event.to_dict(), **self.source(), "deltas": {str(k): v for k, v in self.deltas.items()},
                **extra}

    def hub_item(self) -> dict:
        # the hub keeps the StepEvent (Python readers use it as is); JSON is built later, once, by the
        # readers that need it (engine.api.protocol.encode_event)
        return {"type": self.TYPE, **self.source(), "event": self.event, "deltas": self.deltas,
                "roofline": self.roofline}

    @classmethod
    def from_hub_item(cls, item: dict) -> StepMessage:
        return cls(event=item["event"], deltas=item["deltas"], roofline=item.get("roofline"),
                   **{f.name: item.get(f.name) for f in fields(Event)})


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

    @classmethod
    def of(cls, out: RequestOutput) -> FinishedEvent:
        return cls(request_id=out.request_id, finish_reason=out.finish_reason, error=out.error, text=out.text,
                   num_prompt_tokens=len(out.prompt_token_ids), num_output_tokens=len(out.output_token_ids),
                   arrival_s=out.arrival_s, first_token_s=out.first_token_s, finish_s=out.finish_s,
                   num_cached_tokens=out.num_cached_tokens)


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
    return {"entry_fields": list(ENTRY_FIELDS), "phases": list(PHASES), "event_types": [e.TYPE for e in EVENTS],
            "remote_strategy": REMOTE, "wait_reasons": TEMPLATES, "launch_at": LAUNCH_AT,
            "status": {"paused": PAUSED, "resumed": RESUMED, "run_started": RUN_STARTED}}
