"""Recorded events -> a Chrome trace (the Trace Event Format that Perfetto and chrome://tracing open).

Input: the wire dicts /engine/ws sends (engine/events.py), e.g. the EventHub's window encoded. Output:
{"traceEvents": [...]} with one process per lane and, inside it, one track (thread) per request, named
"#<id> <name or tag>". A request's track holds its slices, which never overlap: queued (arrival until
first scheduled), prefill (one per chunk; "recompute" after a preemption), decode (consecutive
iterations merged), preempted (until scheduled again) and held (static batching: finished, but its row
is still computed until the batch ends), on a disaggregated lane "KV hand-off" (from its first token on
the prefill engine until the decode engine copied its KV; the copy's blocks, bytes and ms in its args),
and an instant when it finished. Per lane, counters per iteration: batch rows, tokens by phase, KV blocks
used (a disaggregated lane: per engine). Times are the service clock in whole microseconds.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..events import (DECODE, ENTRY_FIELDS, PADDING, PREFILL, FinishedEvent, RequestEvent, StepMessage, StepRows,
                      full_entries)

QUEUED, RECOMPUTE, PREEMPTED, HELD, HANDED = "queued", "recompute", "preempted", "held", "KV hand-off"
MERGED = (DECODE, HELD)  # consecutive iterations of these make one slice; prefill chunks stay apart
SPEC_ARGS = {"drafted", "accepted"}  # speculative decoding: a decode slice's draft tokens and those accepted
_RID, _PHASE, _TOKENS, _CTX, _DRAFTED, _ACCEPTED = (ENTRY_FIELDS.index(f) for f in (
    "request_id", "phase", "num_tokens", "context_len", "drafted", "accepted"))


def us(t: float) -> int:
    return round(t * 1_000_000)


_ABOUT_REQUESTS = (RequestEvent.TYPE, StepMessage.TYPE, FinishedEvent.TYPE)


def chrome_trace(events: Iterable[dict]) -> dict:
    """The trace of these events (in the order the hub published them)."""
    lanes: dict[str, _Lane] = {}
    rows = StepRows()
    for ev in events:
        name = ev.get("lane")
        if name is None or ev.get("type") not in _ABOUT_REQUESTS:
            continue  # service-wide or not about requests
        if ev["type"] == StepMessage.TYPE and (ev := rows.resolve(ev)) is None:
            continue  # its rows go on from steps before the window, until its pool's next key frame
        lane = lanes.get(name)
        if lane is None:
            lane = lanes[name] = _Lane(len(lanes) + 1, name, ev.get("strategy"))
        lane.take(ev)
    return {"traceEvents": [e for lane in lanes.values() for e in lane.trace_events()],
            "displayTimeUnit": "ms",
            "otherData": {"source": "inflight", "clock": "service clock (seconds since start) in microseconds"}}


@dataclass
class _Track:
    rid: int
    label: str = ""
    slices: list[dict] = field(default_factory=list)
    marks: list[dict] = field(default_factory=list)
    open: tuple[str, float] | None = None  # a wait in progress: (kind, since)
    open_args: dict = field(default_factory=dict)  # what is known of it (a hand-off: its copy)
    last_it: int = -2                      # the iteration (of its engine) that last scheduled it
    preemptions: int = 0

    def close(self, t: float) -> None:
        if self.open is not None:
            kind, t0 = self.open
            self.slices.append(_slice(kind, t0, max(t, t0), self.open_args))
            self.open, self.open_args = None, {}

    def run(self, kind: str, t0: float, t1: float, it: int, prev: int, args: dict) -> None:
        """prev: the iteration before `it` on the same engine (consecutive ones merge)."""
        self.close(t0)
        last = self.slices[-1] if self.slices else None
        if last is not None and kind in MERGED and last["name"] == kind and self.last_it == prev:
            last["dur"] = us(t1) - last["ts"]
            merged = last["args"]
            merged.update(tokens=merged["tokens"] + args["tokens"], iterations=merged["iterations"] + 1,
                          last_step=args["step"])
            for k in SPEC_ARGS & args.keys():
                merged[k] = merged.get(k, 0) + args[k]
        else:
            if kind in MERGED:
                args = {"tokens": args["tokens"], "iterations": 1, "first_step": args["step"], "last_step": args["step"],
                        **{k: args[k] for k in SPEC_ARGS & args.keys()}}
            self.slices.append(_slice(kind, t0, t1, args))
        self.last_it = it


def _slice(kind: str, t0: float, t1: float, args: dict) -> dict:
    ts = us(t0)
    return {"name": kind, "cat": kind, "ph": "X", "ts": ts, "dur": max(0, us(t1) - ts), "args": args}


class _Lane:
    def __init__(self, pid: int, name: str, strategy: str | None):
        self.pid, self.name, self.strategy = pid, name, strategy
        self.tracks: dict[int, _Track] = {}
        self.counters: list[dict] = []
        self.it = -1          # iterations published by this lane (its steps, counted here)
        self.part_it: dict[str, int] = {}  # a disaggregated lane: each engine's last iteration
        self.last_t = 0.0

    def track(self, rid: int) -> _Track:
        t = self.tracks.get(rid)
        if t is None:
            t = self.tracks[rid] = _Track(rid)
        return t

    def take(self, ev: dict) -> None:
        kind = ev["type"]
        if kind == RequestEvent.TYPE:
            self._request(ev)
        elif kind == StepMessage.TYPE:
            self._step(ev)
        else:
            self._finished(ev)

    def _request(self, ev: dict) -> None:
        tr = self.track(ev["request_id"])
        tr.label = ev.get("name") or ev.get("tag") or ""
        if not tr.slices and tr.open is None:
            tr.open = (QUEUED, ev["arrival_s"])
        self.last_t = max(self.last_t, ev["arrival_s"])

    def _step(self, ev: dict) -> None:
        self.it += 1
        part = ev.get("part")
        prev = self.part_it.get(part, -2) if part else self.it - 1
        t0, t1 = ev["t_start"], ev["t_end"]
        for rid, blocks, nbytes, seconds in ev.get("handoffs") or ():
            self.track(rid).open_args = {"blocks": blocks, "bytes": nbytes, "copy_ms": 1000 * seconds}
        for rid in ev.get("preempted") or ():
            tr = self.track(rid)
            tr.close(t0)
            tr.open, tr.preemptions = (PREEMPTED, t0), tr.preemptions + 1
        rows = _rows(full_entries(ev.get("entries") or ()))
        for rid, row in rows.items():
            tr = self.track(rid)
            kind = _kind(row, tr)
            args = {"tokens": row[DECODE] + row[PREFILL] if kind != HELD else row[PADDING], "step": ev["step"]}
            if kind in (PREFILL, RECOMPUTE):
                args.update(context_len=row["ctx"], padding=row[PADDING])
            if row["drafted"]:
                args.update(drafted=row["drafted"], accepted=row["accepted"])
            tr.run(kind, t0, t1, self.it, prev, args)
        for rid in ev.get("handed_off") or ():
            self.track(rid).open = (HANDED, t1)
        if part:
            self.part_it[part] = self.it
        self._count(ev, rows)
        self.last_t = max(self.last_t, t1)

    def _finished(self, ev: dict) -> None:
        tr = self.track(ev["request_id"])
        t = ev.get("finish_s") or self.last_t
        tr.close(t)  # aborted while queued or preempted
        tr.marks.append({"name": f"finished: {ev['finish_reason']}", "cat": "finished", "ph": "i", "s": "t",
                         "ts": us(t), "args": {"finish_reason": ev["finish_reason"], "error": ev.get("error"),
                                               "output_tokens": ev.get("num_output_tokens")}})
        self.last_t = max(self.last_t, t)

    def _count(self, ev: dict, rows: dict) -> None:
        ts = us(ev["t_start"])
        held = sum(1 for r in rows.values() if not r[PREFILL] and not r[DECODE])
        tokens = {p: sum(r[p] for r in rows.values()) for p in (PREFILL, DECODE, PADDING)}
        series = [("batch size", {"running": len(rows) - held, "held": held}), ("tokens per step", tokens)]
        if ev.get("kv"):
            series.append(("KV blocks used", {"used": ev["kv"]["used"]}))
        if any(r["drafted"] for r in rows.values()):
            series.append(("draft tokens per step", {k: sum(r[k] for r in rows.values()) for k in ("drafted", "accepted")}))
        engine = f" ({ev['part']} engine)" if ev.get("part") else ""  # a disaggregated lane's engines apart
        self.counters += [{"name": n + engine, "ph": "C", "ts": ts, "pid": self.pid, "args": a} for n, a in series]

    def trace_events(self) -> list[dict]:
        title = self.name if self.strategy in (None, self.name) else f"{self.name} ({self.strategy})"
        out = [_meta("process_name", self.pid, 0, {"name": title}),
               _meta("process_sort_index", self.pid, 0, {"sort_index": self.pid})]
        for rid, tr in sorted(self.tracks.items()):
            tr.close(self.last_t)  # still waiting when the window ended
            out += [_meta("thread_name", self.pid, rid, {"name": f"#{rid} {tr.label}".rstrip()}),
                    _meta("thread_sort_index", self.pid, rid, {"sort_index": rid})]
            out += [{**e, "pid": self.pid, "tid": rid} for e in tr.slices + tr.marks]
        return out + self.counters


def _rows(entries) -> dict[int, dict]:
    """A step's entries per request: tokens by phase, the context length (a static row can hold a
    prefill entry and a padding entry) and speculative decoding's draft tokens and accepted ones."""
    rows: dict[int, dict] = {}
    for e in entries:
        row = rows.setdefault(e[_RID], {PREFILL: 0, DECODE: 0, PADDING: 0, "ctx": 0, "phases": set(), "drafted": 0,
                                        "accepted": 0})
        row[e[_PHASE]] += e[_TOKENS]
        if len(e) > _ACCEPTED:  # recordings made before speculative decoding lack these
            row["drafted"] += e[_DRAFTED]
            row["accepted"] += e[_ACCEPTED]
        row["phases"].add(e[_PHASE])
        row["ctx"] = max(row["ctx"], e[_CTX])
    return rows


def _kind(row: dict, tr: _Track) -> str:
    if DECODE in row["phases"]:
        return DECODE
    if PREFILL in row["phases"]:
        return RECOMPUTE if tr.preemptions else PREFILL
    return HELD  # padding only: a finished row still in its static batch


def _meta(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}
