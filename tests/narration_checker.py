"""Is every sentence of the narrator true? An independent check: each sentence is parsed back (a regex
per template) and its claim re-derived from the hub's items, without the narrator's code.

check(events, sentences, start) -> what is false, one line each (empty: every sentence is true). `events`
are the hub's from the stream's beginning (read here as wire dicts, a step's `event` kept a StepEvent); the
narrator read events[start:], so it may name only requests whose `request` event is there.
A sentence no template parses is false too: a new template must be taught here."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.events import (DECODE, DECODE_PART, ENTRY_FIELDS, EVENTS, PADDING, PREFILL, SWAP_IN, SWAP_OUT, StepEntry,
                           StepEvent, StepMessage, StepRows, full_entries, sampled_ids)
from engine.scheduler import waits

IDS = r"#\d+(?:(?:, #\d+)*(?: and (?:#\d+|\d+ more)))?"
NUM = r"\d[\d,]*"
STEP_TEMPLATES = {
    "slot_reuse": rf"(?P<new>{IDS}) took the (?P<slot>slots?) (?P<old>{IDS}) freed in the previous iteration",
    "joined": rf"(?P<new>{IDS}) joined the running batch while (?P<n>\d+) (?P<req>requests?) kept decoding",
    "preempted": (rf"(?P<pool>the KV pool ran out of blocks: )?(?P<ids>{IDS}) (?P<was>was|were) preempted"
                  r"(?: to free (?:its|their) blocks(?: for #(?P<for>\d+))?"
                  r"| by #(?P<by>\d+) \(priority (?P<bp>-?\d+) over (?P<p>-?\d+)\))?"
                  r"; (?P<kv>(?:its|their) KV (?:was|were) copied to the host pool, to come back when (?:it resumes|"
                  r"they resume)|(?:the host pool is full: |some to the host pool, the others dropped: )?"
                  r"(?:it|they) will recompute (?:its|their) tokens later)"),
    "swapped_in": (rf"#(?P<id>\d+) is back after its preemption: its (?P<n>{NUM}) KV blocks? came back from the "
                   "host pool, nothing recomputed"),
    "recompute": (rf"#(?P<id>\d+) is back after its preemption: it recomputes the (?P<n>{NUM}) tokens? it had "
                  "already computed once"),
    "prefix_hit": (rf"#(?P<id>\d+) took (?P<c>{NUM}) of its (?P<p>{NUM}) prompt tokens from the prefix cache and "
                   "prefills only the rest"),
    "chunked": (rf"#(?P<id>\d+)'s (?P<p>{NUM})-token prompt is prefilled a chunk at a time: (?P<k>{NUM}) tokens "
                r"this iteration, while (?P<n>\d+) (?P<req>request keeps|requests keep) decoding"),
    "whole": (rf"#(?P<id>\d+)'s (?P<p>{NUM})-token prompt was prefilled whole in one (?P<ms>{NUM}) ms iteration: "
              r"(?P<n>\d+) (?P<req>decoding requests?) waited that long for the next token"),
    "padding": (rf"(?P<ids>{IDS}) finished but (?P<rows>its row is|their rows are) still computed; (?P<n>\d+) of "
                r"(?P<m>\d+) (?P<are>rows (?:is|are)) padding"),
    "handed_off": (rf"#(?P<id>\d+) moved from the prefill engine to the decode engine: its (?P<n>{NUM}) KV blocks? "
                   r"\((?P<mb>\d+\.\d\d) MB\) copied in (?P<ms>\d+\.\d) ms; it decodes there, where no prompt is "
                   "prefilled"),
    "speculated": r"#(?P<id>\d+) accepted (?P<a>\d+) of (?P<d>\d+) drafted tokens: (?P<n>\d+) tokens in one step",
    "jump": (r"#(?P<id>\d+) started ahead of (?:#(?P<x>\d+), which arrived earlier|(?P<k>\d+) requests that "
             r"arrived earlier): (?P<why>.+)"),
}
WHY = {
    "sjf": (rf"it is the shorter job: (?P<a>{NUM}) tokens of prompt and answer against (?P<b>{NUM}) for "
            r"#(?P<o>\d+) \(shortest job first\)"),
    "fair": r"its tenant (?P<a>.+) goes before #(?P<o>\d+)'s tenant (?P<b>.+) \(fair share per tenant\)",
    "priority": r"its priority (?P<a>-?\d+) is more urgent than #(?P<o>\d+)'s (?P<b>-?\d+) \(lower runs first\)",
}
LATE = (r"(?:#(?P<o>\d+) is|all (?P<n>\d+) are) past the (?P<s>[\d.]+) s TTFT deadline after arriving, and the "
        r"slo policy serves late requests last")
KEYS = {"sjf": lambda r: r["num_prompt_tokens"] + r["max_tokens"], "fair": lambda r: r.get("tenant"),
        "priority": lambda r: r.get("priority", 0)}  # what each policy orders by, as the requests say it
PARSE = {"sjf": lambda x: num(x), "fair": str, "priority": int}
LONG_WAIT = (r"#(?P<id>\d+) has waited (?P<s>\d+) s, waiting for a full batch: (?P<have>\d+) of (?P<size>\d+): "
             r"this lane launches only full batches; the presenter can launch this one now \(Launch\)")
FINISHED = r"finished (?:all (?P<n>\d+) requests|its (?P<one>1) request) in (?P<s>\d+\.\d) s"
COMPARED = r"(?P<lane>.+?) needed (?P<parts>.+) for the same (?P<n>\d+) requests"
PART = r"(?P<r>\d+\.\d)x the time (?P<lane>.+?) took"


# ---- reading ---------------------------------------------------------------------------------
def kind(sentence) -> str | None:
    """Which template a sentence follows (None: none)."""
    body = re.sub(r"^iteration \d+: ", "", sentence.text)
    templates = {**STEP_TEMPLATES, "long_wait": LONG_WAIT, "finished": FINISHED, "compared": COMPARED}
    return next((name for name, pattern in templates.items() if re.fullmatch(pattern, body)), None)


@dataclass
class Ids:
    named: list[int]
    total: int  # named plus "and N more"


def parse_ids(text: str) -> Ids:
    named = [int(x) for x in re.findall(r"#(\d+)", text)]
    more = re.search(r"and (\d+) more$", text)
    return Ids(named, len(named) + (int(more.group(1)) if more else 0))


def num(text: str) -> int:
    return int(text.replace(",", ""))


def step_message(d: dict) -> StepMessage:
    """A step event as the socket sends it (and a recording stores it) -> as the hub holds it."""
    kv = d.get("kv", {})
    ints = lambda m: {int(k): v for k, v in (m or {}).items()}  # noqa: E731
    ev = StepEvent(step=d["step"], strategy=d["strategy"], t_start=d["t_start"], t_end=d["t_end"],
                   entries=[StepEntry(**dict(zip(ENTRY_FIELDS, e))) for e in full_entries(d["entries"])],
                   num_waiting=d["num_waiting"], num_running=d["num_running"], admitted=d["admitted"],
                   finished=d["finished"], preempted=d["preempted"], tokens_used=d.get("tokens_used", 0),
                   token_budget=d.get("token_budget", 0), num_blocks=kv.get("num_blocks", 0),
                   block_size=kv.get("block_size", 0), used_blocks=kv.get("used", 0),
                   block_tables=ints(kv.get("block_tables")), kv_tokens=ints(kv.get("kv_tokens")),
                   reserved_unused_slots=kv.get("reserved_unused_slots", 0), sampled=dict.fromkeys(sampled_ids(d)),
                   cached_blocks=kv.get("cached", []), waits=ints(d.get("waits")), swaps=d.get("swaps", []),
                   part=d.get("part"), handed_off=d.get("handed_off", []), handoffs=d.get("handoffs", []))
    return StepMessage(event=ev, lane=d["lane"], strategy=d["strategy"], deltas=ints(d.get("deltas")),
                       roofline=d.get("roofline"))


CLASSES = {e.TYPE: e for e in EVENTS}


def typed(events: list[dict]) -> list:
    """Wire events (a recording's, in order) -> the events as the hub holds them."""
    rows = StepRows()  # (a step's rows that go on from its pool's previous step come as runs)
    return [step_message(rows.resolve(e)) if e["type"] == StepMessage.TYPE else
            CLASSES[e["type"]](**{k: v for k, v in e.items() if k != "type"}) for e in events]


def as_item(event) -> dict:
    """A hub's event -> what this checker reads: the wire dict, a step's `event` kept as the StepEvent."""
    if isinstance(event, StepMessage):
        return {"type": event.TYPE, "lane": event.lane, "strategy": event.strategy, "event": event.event}
    return event.to_dict()


# ---- what happened -----------------------------------------------------------------------------
def rows(ev) -> set[int]:
    return {e.request_id for e in ev.entries}


def decoding(ev) -> set[int]:
    return {e.request_id for e in ev.entries if e.phase == DECODE} - set(ev.admitted)


def padding_only(ev) -> set[int]:
    phases: dict[int, set] = {}
    for e in ev.entries:
        phases.setdefault(e.request_id, set()).add(e.phase)
    return {rid for rid, p in phases.items() if p == {PADDING}}


def prefill(ev, rid: int):
    return next((e for e in ev.entries if e.request_id == rid and e.phase == PREFILL), None)


class Facts:
    """The items, indexed by lane: steps, arrivals, ends, configs."""

    def __init__(self, items: list[dict], start: int):
        self.items, self.start = items, start
        self.steps: dict[str, list[tuple[int, StepEvent]]] = {}
        self.arrivals: dict[tuple[str, int], tuple[int, dict]] = {}
        self.ends: dict[tuple[str, int], tuple[int, dict]] = {}
        for i, item in enumerate(items):
            self._index(i, item)

    def _index(self, i: int, item: dict) -> None:
        lane = item.get("lane")
        if item["type"] == "step":
            self.steps.setdefault(lane, []).append((i, item["event"]))
        elif item["type"] == "request":
            self.arrivals.setdefault((lane, item["request_id"]), (i, item))
        elif item["type"] == "finished":
            self.ends.setdefault((lane, item["request_id"]), (i, item))

    def step(self, lane: str, n: int, t: float) -> tuple[int, StepEvent] | None:
        return next(((i, ev) for i, ev in self.steps.get(lane, []) if ev.step == n and ev.t_end == t), None)

    def before(self, lane: str, i: int) -> list[tuple[int, StepEvent]]:
        return [(j, ev) for j, ev in self.steps.get(lane, []) if j < i]

    def previous(self, lane: str, i: int, n: int) -> StepEvent | None:
        """The lane's step event just before index i, if it is iteration n - 1."""
        earlier = self.before(lane, i)
        return earlier[-1][1] if earlier and earlier[-1][1].step == n - 1 else None

    def seen(self, lane: str, rid: int, i: int) -> bool:
        """Did the narrator read the request's arrival before index i?"""
        at = self.arrivals.get((lane, rid))
        return at is not None and self.start <= at[0] < i

    def request(self, lane: str, rid: int) -> dict:
        return self.arrivals[(lane, rid)][1]

    def config(self, lane: str, i: int) -> dict:
        lanes = [item["lanes"] for item in self.items[:i] if item["type"] == "lanes" and lane in item["lanes"]]
        return lanes[-1][lane] if lanes else {}

    def admitted(self, lane: str, rid: int, i: int) -> list[int]:
        """Indexes of the lane's steps up to index i that admitted rid."""
        return [j for j, ev in self.steps.get(lane, []) if j <= i and rid in ev.admitted]

    def preempted(self, lane: str, rid: int, i: int) -> list[tuple[int, StepEvent]]:
        return [(j, ev) for j, ev in self.before(lane, i) if rid in ev.preempted]

    def ended_by(self, lane: str, rid: int, i: int) -> bool:
        """Did rid end before index i (a finished item, or a step's finished list)?"""
        end = self.ends.get((lane, rid))
        return (end is not None and end[0] < i) or any(rid in ev.finished for _, ev in self.before(lane, i))

    def strategy(self, lane: str) -> str | None:
        return next((ev.strategy for _, ev in self.steps.get(lane, [])), None) or next(
            (item["strategy"] for (name, _), (_, item) in self.arrivals.items() if name == lane), None)


# ---- the checks ----------------------------------------------------------------------------------
def check(events: list, sentences, start: int = 0) -> list[str]:
    checker = Checker(Facts([as_item(e) for e in events], start))
    return [f"{s.lane} {s.step} {s.text!r}: {why}" for s in sentences if (why := checker.sentence(s))]


class Checker:
    def __init__(self, facts: Facts):
        self.facts = facts
        self.credited: set[tuple[str, int]] = set()  # (lane, request id) whose freed slot was credited
        self.said: set[tuple[str, int, float]] = set()  # iterations already told of
        self.runs: dict[str, tuple[float, frozenset, float]] = {}  # lane -> its last run told: (end, ids, took)

    def sentence(self, s) -> str | None:
        if s.step is not None:
            return self._iteration(s)
        if s.lane is None:
            return self._compared(s)
        m = re.fullmatch(FINISHED, s.text)
        if m:
            return self._finished(s, m)
        m = re.fullmatch(LONG_WAIT, s.text)
        return self._long_wait(s, m) if m else "no template parses it"

    def _iteration(self, s) -> str | None:
        found, prefix = self.facts.step(s.lane, s.step, s.t), f"iteration {s.step}: "
        if found is None or not s.text.startswith(prefix):
            return "no such iteration in this lane"
        if (s.lane, s.step, s.t) in self.said:
            return "a second sentence about one iteration"
        self.said.add((s.lane, s.step, s.t))
        (i, ev), body = found, s.text[len(prefix):]
        unseen = [r for r in map(int, re.findall(r"#(\d+)", body)) if not self.facts.seen(s.lane, r, i)]
        if unseen:
            return f"names requests the narrator never saw arrive: {unseen}"
        return self._claim(s.lane, i, ev, body)

    def _claim(self, lane: str, i: int, ev: StepEvent, body: str) -> str | None:
        for name, pattern in STEP_TEMPLATES.items():
            m = re.fullmatch(pattern, body)
            if m:
                return getattr(self, f"_{name}")(lane, i, ev, m)
        return "no template parses it"

    # -- continuous batching: slots ----------------------------------------------------------------
    def _slot_reuse(self, lane, i, ev, m) -> str | None:
        new, old = parse_ids(m["new"]), parse_ids(m["old"])
        prev, freed = self._freed(lane, i, ev)
        if prev is None:
            return freed
        if not set(old.named) <= set(freed) or not set(new.named) <= set(ev.admitted):
            return f"freed {freed}, admitted {ev.admitted}"
        if new.total != old.total or old.total > len(freed) or len(ev.admitted) > len(freed):
            return "slots and requests are not paired one to one"
        if any(self.facts.request(lane, r)["arrival_s"] > prev.t_end for r in new.named):
            return "a request named arrived after the slot came free"
        return "grammar" if (m["slot"] == "slots") != (old.total > 1) else self._credit(lane, old.named)

    def _freed(self, lane, i, ev):
        """(the previous iteration, the requests it finished: the only free slots now), or (None, why not)."""
        prev = self.facts.previous(lane, i, ev.step)
        size = self.facts.config(lane, i).get("max_num_seqs")
        if ev.strategy != "continuous" or prev is None or size is None:
            return None, "no slot claim without continuous batching, the previous iteration and max_num_seqs"
        if prev.part != ev.part:
            return None, "the previous iteration ran on the other engine of a disaggregated lane"
        aborted = [r for r in ev.finished if r in rows(prev) and r not in rows(ev)]
        if len(rows(prev)) != size or ev.preempted or aborted:
            return None, f"the previous batch was not full ({len(rows(prev))} of {size}) or other slots were freed"
        return prev, [r for r in prev.finished if r in rows(prev)]

    def _credit(self, lane: str, freed: list[int]) -> str | None:
        twice = [r for r in freed if (lane, r) in self.credited]
        self.credited.update((lane, r) for r in freed)
        return f"the slot of {twice} was credited twice" if twice else None

    def _joined(self, lane, i, ev, m) -> str | None:
        new = parse_ids(m["new"])
        if ev.strategy != "continuous" or not set(new.named) <= set(ev.admitted) or new.total > len(ev.admitted):
            return f"admitted {ev.admitted}"
        return self._count(int(m["n"]), len(decoding(ev)), m["req"], "request")

    @staticmethod
    def _count(said: int, true: int, words: str = "", noun: str = "") -> str | None:
        if said != true:
            return f"said {said}, the events say {true}"
        plural = said != 1
        return "grammar" if noun and words.startswith(noun + "s") != plural else None

    # -- preemption and recompute --------------------------------------------------------------------
    def _preempted(self, lane, i, ev, m) -> str | None:
        victims = parse_ids(m["ids"])
        if not set(victims.named) <= set(ev.preempted) or victims.total > len(ev.preempted):
            return f"preempted {ev.preempted}"
        if (m["was"] == "were") != (victims.total > 1):
            return "grammar"
        reasons = [ev.waits.get(r) or {} for r in victims.named]
        if m["pool"] and any(w.get("why") != "preempted_for_blocks" for w in reasons):
            return f"not preempted for KV blocks: {reasons}"
        if m["for"] and any(w.get("by") != int(m["for"]) for w in reasons):
            return f"not for #{m['for']}: {reasons}"
        if m["by"] and any((w.get("why"), w.get("by"), w.get("by_priority"), w.get("priority")) !=
                           ("preempted_by_priority", int(m["by"]), int(m["bp"]), int(m["p"])) for w in reasons):
            return f"not by #{m['by']} at those priorities: {reasons}"
        kv = {w.get("kv", waits.DROPPED) for w in reasons}
        said = m["kv"]
        want = ({waits.SWAPPED} if "copied to the host pool" in said else {waits.DROPPED_HOST_FULL}
                if said.startswith("the host pool is full") else None if said.startswith("some") else {waits.DROPPED})
        if (kv != want) if want else (len(kv) < 2 or waits.SWAPPED not in kv):
            return f"not where the KV went: {kv}"
        swapped = {r for r, way, _ in ev.swaps if way == SWAP_OUT}
        if (waits.SWAPPED in kv) != bool(swapped & set(victims.named)):
            return f"the KV copied out: {swapped}"
        return None

    def _swapped_in(self, lane, i, ev, m) -> str | None:
        rid = int(m["id"])
        back = [n for r, way, n in ev.swaps if r == rid and way == SWAP_IN]
        if not back or rid not in ev.admitted:
            return "not a swapped-out request admitted again"
        return self._count(num(m["n"]), back[0])

    def _recompute(self, lane, i, ev, m) -> str | None:
        rid, e = int(m["id"]), prefill(ev, int(m["id"]))
        cuts = self.facts.preempted(lane, rid, i + 1)  # this iteration may preempt it and admit it again
        if e is None or rid not in ev.admitted or e.cached_tokens or not cuts:
            return "not a preempted request admitted again to recompute"
        if any(j > cuts[-1][0] for j in self.facts.admitted(lane, rid, i - 1)):
            return "it was admitted again before this iteration"
        before = [x.context_len for _, s in self.facts.before(lane, cuts[-1][0]) for x in s.entries
                  if x.request_id == rid]
        return self._count(num(m["n"]), before[-1] if before else -1)

    # -- prefills --------------------------------------------------------------------------------
    def _prompt(self, lane, i, ev, m):
        """(the request's prefill entry, its prompt length), or a reason why no prompt claim holds."""
        rid = int(m["id"])
        e = prefill(ev, rid)
        if e is None or self.facts.preempted(lane, rid, i + 1):
            return None, "no prefill of a request's prompt in this iteration"
        prompt = self.facts.request(lane, rid)["num_prompt_tokens"]
        return (e, prompt), (None if prompt == num(m["p"]) else f"its prompt has {prompt} tokens")

    def _speculated(self, lane, i, ev, m) -> str | None:
        e = next((e for e in ev.entries if e.request_id == int(m["id"]) and e.drafted), None)
        if e is None:
            return "no draft of that request in this iteration"
        if (e.accepted, e.drafted, e.accepted + 1) != (int(m["a"]), int(m["d"]), int(m["n"])):
            return f"it accepted {e.accepted} of {e.drafted} drafted tokens"
        return None

    def _handed_off(self, lane, i, ev, m) -> str | None:
        copy = next((h for h in ev.handoffs if h[0] == int(m["id"])), None)
        if copy is None or ev.part != DECODE_PART:
            return "no copy of that request into the decode engine's pool in this iteration"
        _, blocks, nbytes, seconds = copy
        if (num(m["n"]), m["mb"], m["ms"]) != (blocks, f"{nbytes / 1e6:.2f}", f"{1000 * seconds:.1f}"):
            return f"its copy was {blocks} blocks, {nbytes} bytes in {seconds} s"
        return None

    def _prefix_hit(self, lane, i, ev, m) -> str | None:
        found, why = self._prompt(lane, i, ev, m)
        return why or self._count(num(m["c"]), found[0].cached_tokens)

    def _chunked(self, lane, i, ev, m) -> str | None:
        found, why = self._prompt(lane, i, ev, m)
        if why:
            return why
        (e, prompt) = found
        if e.context_len >= prompt or e.num_tokens != num(m["k"]):
            return f"not a chunk of {m['k']} with more to come: {e}"
        return self._count(int(m["n"]), len(decoding(ev)), m["req"], "request")

    def _whole(self, lane, i, ev, m) -> str | None:
        found, why = self._prompt(lane, i, ev, m)
        if why:
            return why
        (e, prompt) = found
        if e.num_tokens < prompt or f"{1000 * (ev.t_end - ev.t_start):,.0f}" != m["ms"]:
            return f"not the whole prompt, or not {m['ms']} ms: {e}"
        return self._count(int(m["n"]), len(decoding(ev)), m["req"], "decoding request")

    # -- static batching ---------------------------------------------------------------------------
    def _padding(self, lane, i, ev, m) -> str | None:
        named, pad = parse_ids(m["ids"]), padding_only(ev)
        if ev.strategy == "continuous" or not set(named.named) <= pad or named.total > len(pad):
            return f"the padding rows are {sorted(pad)}"
        if not all(self.facts.ended_by(lane, r, i) for r in named.named):
            return "a row named had not finished"
        if (m["rows"] == "their rows are") != (named.total > 1) or (m["are"] == "rows are") != (len(pad) > 1):
            return "grammar"
        return self._count(int(m["n"]), len(pad)) or self._count(int(m["m"]), len(rows(ev)))

    # -- who goes first ------------------------------------------------------------------------------
    def _jump(self, lane, i, ev, m) -> str | None:
        rid = int(m["id"])
        if rid not in ev.admitted or self.facts.admitted(lane, rid, i - 1):
            return "it did not start in this iteration"
        passed = self._passed(lane, i, rid)
        if m["x"] is not None and int(m["x"]) not in passed or m["k"] is not None and int(m["k"]) != len(passed):
            return f"the requests it passed are {sorted(passed)}"
        if self.facts.config(lane, i).get("scheduling_policy") == "slo":
            return self._late(lane, i, ev, passed, m["why"])
        return self._why(lane, i, rid, passed, m["why"])

    def _passed(self, lane: str, i: int, rid: int) -> set[int]:
        """Seen requests that arrived before rid and had neither started nor ended by this iteration."""
        arrived = self.facts.request(lane, rid)["arrival_s"]
        return {r for (name, r), (j, item) in self.facts.arrivals.items()
                if name == lane and self.facts.seen(lane, r, i) and item["arrival_s"] < arrived
                and not self.facts.admitted(lane, r, i) and not self.facts.ended_by(lane, r, i + 1)}

    def _why(self, lane: str, i: int, rid: int, passed: set[int], text: str) -> str | None:
        """The policy's reason, checked against both requests: their numbers, and that it puts `rid` first."""
        policy = self.facts.config(lane, i).get("scheduling_policy")
        m = re.fullmatch(WHY.get(policy, "$^"), text)
        if m is None or int(m["o"]) not in passed:
            return f"not the {policy} policy's reason"
        a, b = (KEYS[policy](self.facts.request(lane, r)) for r in (rid, int(m["o"])))
        if (a, b) != (PARSE[policy](m["a"]), PARSE[policy](m["b"])):
            return f"the requests say {a} and {b}"
        first = a != b if policy == "fair" else a < b
        return None if first and a is not None else "that would not put it first"

    def _late(self, lane: str, i: int, ev: StepEvent, passed: set[int], text: str) -> str | None:
        """slo: every request passed was past its TTFT deadline when the iteration began."""
        m = re.fullmatch(LATE, text)
        ttft = self.facts.config(lane, i).get("slo_ttft_s")
        if m is None or ttft is None or m["s"] != f"{ttft:g}":
            return f"not the slo policy's reason at a TTFT SLO of {ttft}"
        if (m["o"] is not None and int(m["o"]) not in passed) or (m["n"] is not None and int(m["n"]) != len(passed)):
            return f"the requests it passed are {sorted(passed)}"
        late = [ev.t_start > self.facts.request(lane, r)["arrival_s"] + ttft for r in passed]
        return None if all(late) else "not every request it passed was late"

    # -- waiting and runs ----------------------------------------------------------------------------
    def _long_wait(self, s, m) -> str | None:
        lane, rid, end = s.lane, int(m["id"]), len(self.facts.items)
        if self.facts.strategy(lane) != "static" or not self.facts.seen(lane, rid, end):
            return "not a static lane's request"
        if self.facts.admitted(lane, rid, end) or self.facts.ended_by(lane, rid, end):
            return "it does not wait"
        why = self._reason(lane, rid)
        if (why.get("why"), why.get("have"), why.get("size")) != ("batch_filling", int(m["have"]), int(m["size"])):
            return f"it waits because {why}"
        waited = s.t - self.facts.request(lane, rid)["arrival_s"]
        return None if f"{waited:.0f}" == m["s"] else f"it has waited {waited:.1f} s"

    def _reason(self, lane: str, rid: int) -> dict:
        """The latest reason the scheduler gave for rid's wait."""
        why: dict = {}
        for item in self.facts.items:
            if item.get("lane") != lane or item["type"] not in ("step", "waits"):
                continue
            changes = item["event"].waits if item["type"] == "step" else item["waits"]
            why = next((w or {} for k, w in changes.items() if int(k) == rid), why)
        return why

    def _finished(self, s, m) -> str | None:
        n, took = int(m["n"] or m["one"]), m["s"]
        ids = self._run(s.lane, s.t, took, n)
        if ids is None:
            return f"no {n} requests of this lane ran alone from an arrival {took} s before then to then"
        unseen = [r for r in ids if not self.facts.seen(s.lane, r, len(self.facts.items))]
        if unseen:
            return f"the narrator never saw {unseen} arrive"
        if s.lane in self.runs and ids & self.runs[s.lane][1]:
            return "a run told twice"
        start = min(self.facts.request(s.lane, r)["arrival_s"] for r in ids)
        self.runs[s.lane] = (s.t, ids, s.t - start)
        return None

    def _run(self, lane: str, end: float, took: str, n: int) -> frozenset | None:
        """The n requests of the lane that arrived from `took` s before `end` on and finished by `end` (the
        last one then), while no other request of the lane was in flight."""
        spans = {rid: (item["arrival_s"], self._finish_s(lane, rid)) for (name, rid), (_, item)
                 in self.facts.arrivals.items() if name == lane}
        for start in sorted({a for a, _ in spans.values() if f"{end - a:.1f}" == took}):
            ids = frozenset(rid for rid, (a, _) in spans.items() if start <= a <= end)
            crossing = [rid for rid, (a, f) in spans.items() if a < start < f or a <= end < f]
            if len(ids) == n and not crossing and max(spans[r][1] for r in ids) == end:
                return ids
        return None

    def _finish_s(self, lane: str, rid: int) -> float:
        end = self.facts.ends.get((lane, rid))
        return float("inf") if end is None else end[1]["finish_s"] or end[1]["arrival_s"]

    def _compared(self, s) -> str | None:
        m = re.fullmatch(COMPARED, s.text)
        if m is None:
            return "no template parses it"
        end, ids, took = self.runs.get(m["lane"], (None, None, None))
        if end != s.t or len(ids) != int(m["n"]):
            return f"{m['lane']} did not just finish a run of {m['n']} requests"
        for part in m["parts"].split(", "):
            p = re.fullmatch(PART, part)
            _, others, theirs = self.runs.get(p and p["lane"], (None, None, None))
            if others != ids:
                return f"not the same {m['n']} requests as {part!r}"
            if f"{took / theirs:.1f}" != p["r"]:
                return f"the ratio is {took / theirs:.2f}"
        return None
