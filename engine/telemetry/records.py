"""What one strategy run leaves behind: a record per request and a sample per busy step.

Every strategy (ours and the peers) reduces its run to these, and `metrics.py`
computes every number from them alone. Times are seconds on one monotonic clock
(`time.perf_counter` unless a run says otherwise); only differences are used.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..events import DECODE, PADDING, PHASES, PREFILL, StepEvent
from ..request import RequestOutput


@dataclass(frozen=True)
class RequestLabel:
    """What a run's breakdowns group a request by (metrics.py): its index in the run, its class and its
    tenant. The benchmark's RequestSpec carries the same three."""
    index: int
    cls: str | None = None
    tenant: str | None = None


@dataclass
class RequestRecord:
    """One request's life.

    scheduled_s: when it first entered a batch (admission); None if never.
    output_tokens: useful tokens it received (a padded batch may compute more).
    """
    index: int
    arrival_s: float
    scheduled_s: float | None
    first_token_s: float | None
    finish_s: float | None
    prompt_tokens: int
    output_tokens: int
    finish_reason: str | None = None

    def to_dict(self, t0: float = 0.0) -> dict:
        d = asdict(self)
        for k in ("arrival_s", "scheduled_s", "first_token_s", "finish_s"):
            if d[k] is not None:
                d[k] -= t0
        return d


@dataclass
class StepSample:
    """One forward pass that computed something.

    rows: requests that had a row in the batch (static's finished rows included);
    active_rows: rows that computed at least one useful token.
    *_tokens: token slots computed this step, by kind (padding is computed and discarded).
    kv_allocated_slots: KV slots held by requests after the step (blocks x block size, or
    the padded cache of a generate() batch); kv_unused_slots: those holding no useful token.
    prefix_queries / prefix_hits: prompt tokens looked up in / served from the prefix cache
    (our engine only). served: workload request index -> prompt and decode tokens computed for
    it this step (kept only when a run needs them: per-tenant service). decode_rows, drafted,
    accepted: speculative decoding's rows, draft tokens and accepted drafts (our engine only).
    preempted, swapped_blocks, swap_bytes, swap_s: requests preempted this step, and swap preemption's
    blocks copied (out and in), their bytes and seconds (our engine only). handoff_bytes, handoff_s: a
    disaggregated lane's decode half: the KV it copied out of the prefill pool this step.
    """
    t_start: float
    t_end: float
    rows: int
    active_rows: int
    prefill_tokens: int
    decode_tokens: int
    padding_tokens: int
    kv_allocated_slots: int | None = None
    kv_unused_slots: int | None = None
    prefix_queries: int | None = None
    prefix_hits: int | None = None
    served: dict[int, int] | None = None
    # speculative decoding (our engine only): decode rows, their draft tokens, the drafts accepted
    decode_rows: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    # preemption (our engine only): requests preempted, and swap preemption's copies
    preempted: int | None = None
    swapped_blocks: int | None = None
    swap_bytes: int | None = None
    swap_s: float | None = None
    handoff_bytes: int | None = None
    handoff_s: float | None = None

    @property
    def computed_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens + self.padding_tokens


@dataclass
class LaneRun:
    """A lane's run of one workload (in the benchmark a lane is a strategy or a peer). steps is empty
    when the lane cannot be observed per step (hf-cb); metrics that need steps are then None."""
    lane: str
    requests: list[RequestRecord]
    steps: list[StepSample] = field(default_factory=list)
    t0: float = 0.0                      # when the workload started (arrival offsets count from here)
    info: dict = field(default_factory=dict)


def step_sample(ev: StepEvent, index_of: dict[int, int] | None = None) -> StepSample | None:
    """Reduce a StepEvent to a StepSample; None for an idle step (nothing computed or preempted).
    index_of (engine request id -> workload index) asks for `served`."""
    if not (ev.entries or ev.preempted):  # (a step may only preempt: every row went)
        return None
    tokens = dict.fromkeys(PHASES, 0)
    rows, active = set(), set()
    served = None if index_of is None else {}
    decode_rows = drafted = accepted = 0
    for e in ev.entries:
        tokens[e.phase] += e.num_tokens
        decode_rows += e.phase == DECODE
        drafted, accepted = drafted + e.drafted, accepted + e.accepted
        rows.add(e.request_id)
        if e.phase != PADDING and e.num_tokens:
            active.add(e.request_id)
            if served is not None and e.request_id in index_of:
                i = index_of[e.request_id]
                served[i] = served.get(i, 0) + e.num_tokens
    return StepSample(ev.t_start, ev.t_end, len(rows), len(active), tokens[PREFILL], tokens[DECODE],
                      tokens[PADDING], kv_allocated_slots=ev.used_blocks * ev.block_size,
                      kv_unused_slots=ev.reserved_unused_slots, prefix_queries=ev.prefix_queries,
                      prefix_hits=ev.prefix_hits, served=served, decode_rows=decode_rows, drafted=drafted,
                      accepted=accepted, preempted=len(ev.preempted), swapped_blocks=sum(n for *_, n in ev.swaps),
                      swap_bytes=ev.swap_bytes, swap_s=ev.swap_s,
                      handoff_bytes=sum(h[2] for h in ev.handoffs), handoff_s=sum(h[3] for h in ev.handoffs))


def request_record(index: int, out: RequestOutput, scheduled_s: float | None) -> RequestRecord:
    return RequestRecord(index, out.arrival_s, scheduled_s, out.first_token_s, out.finish_s,
                         len(out.prompt_token_ids), len(out.output_token_ids), out.finish_reason)
