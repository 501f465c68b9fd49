"""What a scenario's "What to watch" states, as checks a run can fail: each claim quotes the words it checks
and compares one number of a lane with a bound or with another lane, or the lanes' answers with each
other. A headless run (`python -m engine.workshop.scenarios.headless KEY`) and the tests check them on the machine's
own dtype and speed, so a sentence the screen could contradict does not ship.

    [[claims]]
    says = "The large pool never preempts"     # the words of `watch` it checks
    lane = "pool 512 blocks"
    number = "preemptions"                     # a live metric (headline.py) or a RUN_NUMBERS one
    equals = 0                                 # or above / below / at_most / at_least = N,
                                               # or better_than / as_good_as = "another lane"
    [[claims]]
    says = "the outputs are the same token for token"
    same_answers = ["spec off", "spec on"]
    default_model = true                       # optional: a claim about what the default model writes,
                                               # judged only on a run of it (others: not judged)

Pure data and functions: the caller runs the scenario and hands over the lanes' summaries (the live
metrics, engine/telemetry/metrics.py) and the hub's events (for the answers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.events import FinishedEvent

from .headline import METRICS

# summary numbers a claim may name besides the live metrics (headline.py)
RUN_NUMBERS = {
    "num_steps": "the lane's iterations",
    "max_rows": "the most rows one iteration computed",
    "max_step_tokens": "the most tokens one iteration computed",
    "handoff_mb": "KV copied from a prefill engine to a decode engine",
}
BOUNDS = ("equals", "above", "below", "at_most", "at_least")
VERSUS = ("better_than", "as_good_as")
_HOLDS = {"equals": lambda a, b: a == b, "above": lambda a, b: a > b, "below": lambda a, b: a < b,
          "at_most": lambda a, b: a <= b, "at_least": lambda a, b: a >= b}


@dataclass(frozen=True)
class Claim:
    says: str                  # the words of the scenario's `watch` it checks
    lane: str | None = None
    number: str | None = None  # a live metric or a RUN_NUMBERS key
    test: str | None = None    # one of BOUNDS or VERSUS
    value: float | str | None = None  # the bound, or the other lane
    tenant: str | None = None  # a per-tenant metric: this tenant's value
    same_answers: tuple[str, ...] = ()  # lanes whose finished answers must be equal, request by request
    default_model: bool = False  # about the default model's answers: judged only on a run of it

    def wording(self) -> str:
        if self.same_answers:
            return f"{' and '.join(self.same_answers)} give the same answers"
        of = f"[{self.tenant}]" if self.tenant else ""
        return f"{self.lane}: {self.number}{of} {self.test.replace('_', ' ')} {self.value}"


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    holds: bool | None  # None: not judged (a default_model claim on another model)
    seen: str  # the numbers it was judged on

    def line(self) -> str:
        word = {True: "holds", False: "FAILS", None: "not judged"}[self.holds]
        return f"{word}: {self.claim.says!r} ({self.claim.wording()}; {self.seen})"


NUMBERS = {*METRICS, *RUN_NUMBERS}  # what a claim may name
MAX_CLAIMS = 16
_FIELDS = {"says", "lane", "number", "tenant", "same_answers", "default_model", *BOUNDS, *VERSUS}


def read_claims(raw, lanes: dict, watch: str) -> tuple[Claim, ...]:
    """A scenario file's [[claims]], checked (ValueError naming the claim and the field): each quotes its
    scenario's `watch`, names its lanes and a known number, and makes one test."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_CLAIMS:
        raise ValueError(f"claims: give a list of at most {MAX_CLAIMS} [[claims]] tables")
    return tuple(_read_claim(f"claims[{i}]", c, lanes, watch) for i, c in enumerate(raw))


def _read_claim(field: str, c, lanes: dict, watch: str) -> Claim:
    if not isinstance(c, dict):
        raise ValueError(f"{field}: must be a table")
    unknown = sorted(set(c) - _FIELDS)
    if unknown:
        raise ValueError(f"{field}.{unknown[0]}: unknown field; fields: {', '.join(sorted(_FIELDS))}")
    says = c.get("says")
    if not isinstance(says, str) or not says or " ".join(says.split()) not in " ".join(watch.split()):
        raise ValueError(f"{field}.says: must quote words of the scenario's watch text")
    default_model = c.get("default_model", False)
    if not isinstance(default_model, bool):
        raise ValueError(f"{field}.default_model: true or false")
    if "same_answers" in c:
        same = c["same_answers"]
        if not isinstance(same, list) or len(same) < 2:
            raise ValueError(f"{field}.same_answers: name two or more of the lanes ({', '.join(lanes)})")
        for lane in same:
            _lane(f"{field}.same_answers", lane, lanes)
        return Claim(says, same_answers=tuple(same), default_model=default_model)
    return Claim(says, *_comparison(field, c, lanes), default_model=default_model)


def _lane(field: str, value, lanes: dict) -> str:
    """value if it names one of the lanes, else a ValueError naming the field and what it held."""
    if not isinstance(value, str) or value not in lanes:
        raise ValueError(f"{field}: {value!r:.60} is not one of the lanes ({', '.join(lanes)})")
    return value


def _comparison(field: str, c: dict, lanes: dict) -> tuple:
    _lane(f"{field}.lane", c.get("lane"), lanes)
    if not isinstance(c.get("number"), str) or c["number"] not in NUMBERS:
        raise ValueError(f"{field}.number: one of {', '.join(sorted(NUMBERS))}")
    tests = [t for t in (*BOUNDS, *VERSUS) if t in c]
    if len(tests) != 1:
        raise ValueError(f"{field}: give exactly one of {', '.join((*BOUNDS, *VERSUS))}")
    test, value = tests[0], c[tests[0]]
    if test in VERSUS and _lane(f"{field}.{test}", value, lanes) == c["lane"]:
        raise ValueError(f"{field}.{test}: name another lane than {value!r:.60} ({', '.join(lanes)})")
    if test in BOUNDS and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise ValueError(f"{field}.{test}: must be a number")
    tenant = c.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or METRICS.get(c["number"]) is None
                               or METRICS[c["number"]].per != "tenant"):
        raise ValueError(f"{field}.tenant: only for a per-tenant metric, as text")
    return c["lane"], c["number"], test, value, tenant


def check(claims, summaries: dict[str, dict], events, default_model: bool = True) -> list[Verdict]:
    """Each claim judged on one run: `summaries`, lane -> its live metrics; `events`, the run's hub items;
    default_model: the run's lanes ran the default model."""
    answers = _answers(events)
    return [Verdict(c, None, "another model ran") if c.default_model and not default_model
            else _same(c, answers) if c.same_answers
            else _compare(c, summaries.get(c.lane, {}), summaries.get(c.value, {}))
            for c in claims]


def _answers(events) -> dict[str, dict[int, str]]:
    out: dict[str, dict[int, str]] = {}
    for e in events:
        if isinstance(e, FinishedEvent) and e.lane is not None:
            out.setdefault(e.lane, {})[e.request_id] = e.text
    return out


def _same(c: Claim, answers: dict[str, dict[int, str]]) -> Verdict:
    first, *rest = (answers.get(lane, {}) for lane in c.same_answers)
    differ = sorted(rid for other in rest for rid in set(first) | set(other) if first.get(rid) != other.get(rid))
    seen = f"{len(first)} answers" + (f", request {differ[0]} differs" if differ else ", all equal")
    return Verdict(c, bool(first) and not differ, seen)


def _compare(c: Claim, mine: dict, theirs: dict) -> Verdict:
    a = _number(c, mine)
    if c.test in BOUNDS:
        holds = a is not None and _HOLDS[c.test](a, c.value)
        return Verdict(c, holds, f"{_show(a)}")
    b = _number(c, theirs)
    if a is None or b is None:
        return Verdict(c, False, f"{_show(a)} vs {_show(b)}")
    higher = METRICS[c.number].higher_is_better if c.number in METRICS else False
    better = a > b if higher else a < b
    holds = better or (c.test == "as_good_as" and a == b)
    return Verdict(c, holds, f"{_show(a)} vs {_show(b)}")


def _number(c: Claim, numbers: dict) -> float | None:
    v = numbers.get(c.number)
    if c.tenant is not None:
        v = v.get(c.tenant) if isinstance(v, dict) else None
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def _show(v) -> str:
    return "none" if v is None else f"{v:.4g}"
