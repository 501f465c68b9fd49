"""Read and check scenario files (TOML, one scenario each). Every error names the file and the field.

    title = "Straggler: continuous vs static"
    watch = "..."                        # what to look at
    explain = "..."                      # what is sent
    headline = ["duration_s", "ttft_p50_s"]  # optional: the live metrics the lesson is about (headline.py)
    [[claims]]                           # what watch states, checked on runs (claims.py)
    system = "..."                       # optional: a system message before every prompt (a shared prefix)
    [lanes.continuous]                   # lane name -> EngineConfig overrides of the base config
    strategy = "continuous"
    [[requests]]                         # a group of arrivals
    count = 8                            # how many (default 1)
    at_s = 0.0                           # the first arrives then (default 0)
    when_batch_full = true               # optional: and not before every lane runs a full batch (a lesson
                                         # about a full batch then holds at any engine's speed)
    every_s = 0.5                        # fixed gaps, or poisson_rate = 2.0 (+ seed) for exponential ones
    prompts = "bundled"                  # user messages from assets/prompts.jsonl whose own answers run past
                                         # max_tokens (engine/workshop/prompts.py), or text = "a message"
    join = 1                             # optional: bundled prompts per message (a longer prompt)
    prompt_tokens = [30, 80]             # the prompt lengths the lesson needs (default model, chat template
                                         # included): tests/engine/workshop/test_scenarios.py checks them
    max_tokens = [96, 12]                # answer lengths, cycled over the group (EOS ignored)
    tenant = "flood"                     # optional (the fair policy); priority = -1 (the priority policy)
    # token-id prompts instead (shown as "synthetic prompt"): prompt_len = [24, 32], shared_prefix = 16

Every number is finite and bounded, and the arrivals are counted before any is made, so a file with a
mistake (or a huge count) is refused at once with its field named, never half-expanded.
"""
from __future__ import annotations

import dataclasses
import functools
import random
from pathlib import Path

from engine.config import EngineConfig
from engine.request import MAX_TENANT_CHARS, PRIORITY_RANGE
from engine.serving.lanes import check_lane_name, lane_config
from engine.untrusted import INT64, is_int, is_number, is_text

from ...paths import ASSETS
from ..prompts import load_prompts, message
from .claims import read_claims
from .headline import check_keys
from .model import Arrival, Scenario
from .toml_read import read_toml

SCENARIO_DIR = ASSETS / "scenarios"
MAX_REQUESTS = 256
MAX_TOKENS = 100_000      # a prompt_len, shared_prefix or max_tokens (streams are fitted to the context)
MAX_SECONDS = 3600.0      # at_s, every_s
MAX_RATE = 1000.0         # poisson_rate, arrivals per second
MAX_TEXT_CHARS = 8000     # title, watch, explain, a text prompt
MAX_SYSTEM_CHARS = 16_000  # a system prompt shared by a stream
MAX_JOIN = 100            # bundled prompts joined into one message
_TOP = {"title", "watch", "explain", "headline", "system", "lanes", "requests", "claims"}
_GROUP = {"count", "at_s", "every_s", "poisson_rate", "seed", "prompt_len", "text", "prompts", "join", "system",
          "prompt_tokens", "max_tokens", "shared_prefix", "tenant", "priority", "when_batch_full"}


class ScenarioError(ValueError):
    pass


@functools.cache
def bundled() -> list[dict]:
    return load_prompts()


def load_scenarios(folder: Path = SCENARIO_DIR) -> tuple[Scenario, ...]:
    """Every *.toml in folder, in file-name order (the order of the 1-9 shortcuts)."""
    return tuple(load_scenario(p) for p in sorted(folder.glob("*.toml")))


def load_scenario(path: Path) -> Scenario:
    where = Path(path).name
    data = read_toml(path, lambda problem: ScenarioError(f"{where}: {problem}"))
    _no_unknown(where, "", data, _TOP)
    text = {k: _text(where, k, data.get(k)) for k in ("title", "watch", "explain")}
    lanes = _lanes(where, data.get("lanes"))
    groups = data.get("requests")
    if not isinstance(groups, list) or not groups:
        raise ScenarioError(f"{where}: requests: give at least one [[requests]] group")
    _count_arrivals(where, groups)
    system = data.get("system")
    arrivals = [a for i, g in enumerate(groups) for a in _group(where, f"requests[{i}]", g, system)]
    _static_batches(where, lanes, len(arrivals))
    try:
        claims = read_claims(data.get("claims"), lanes, text["watch"])
    except ValueError as e:
        raise ScenarioError(f"{where}: {e}") from None
    # in time order; at the same time, those that wait for full batches after those that fill them
    arrivals.sort(key=lambda a: (a.at_s, a.when_batch_full))
    return Scenario(key=Path(path).stem, lanes=lanes, arrivals=tuple(arrivals),
                    headline=_headline(where, data.get("headline", Scenario.headline)), claims=claims, **text)


def _headline(where: str, keys) -> tuple[str, ...]:
    if not isinstance(keys, (list, tuple)) or not 1 <= len(keys) <= 4 or not all(isinstance(k, str) for k in keys):
        raise ScenarioError(f"{where}: headline: must be a list of 1 to 4 metric names")
    try:
        return check_keys(keys)
    except ValueError as e:
        raise ScenarioError(f"{where}: headline: {e}") from None


def _no_unknown(where: str, field: str, table: dict, known: set) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ScenarioError(f"{where}: {field}{unknown[0]}: unknown field; fields: {', '.join(sorted(known))}")


def _count_arrivals(where: str, groups: list) -> None:
    """Every group's count, and their sum, within MAX_REQUESTS: checked before any arrival is made."""
    total = 0
    for i, g in enumerate(groups):
        if not isinstance(g, dict):
            raise ScenarioError(f"{where}: requests[{i}]: must be a table")
        total += _int(where, f"requests[{i}].count", g.get("count", 1), 1, MAX_REQUESTS)
    if total > MAX_REQUESTS:
        raise ScenarioError(f"{where}: requests: {total} arrivals, at most {MAX_REQUESTS}")


def _text(where: str, field: str, value, max_chars: int = MAX_TEXT_CHARS) -> str:
    if not is_text(value, max_chars):
        raise ScenarioError(f"{where}: {field}: must be non-empty text of at most {max_chars} characters")
    return value.strip()


def _lanes(where: str, lanes) -> dict[str, dict]:
    if not isinstance(lanes, dict) or not lanes:
        raise ScenarioError(f"{where}: lanes: give at least one [lanes.NAME] table of EngineConfig overrides")
    for name, overrides in lanes.items():
        try:
            check_lane_name(name)
            if not isinstance(overrides, dict):
                raise ValueError("must be a table of EngineConfig fields")
            lane_config(EngineConfig(), overrides)
        except ValueError as e:
            raise ScenarioError(f"{where}: lanes.{name}: {e}") from None
    return lanes


def _group(where: str, field: str, g, system: str | None) -> list[Arrival]:
    if not isinstance(g, dict):
        raise ScenarioError(f"{where}: {field}: must be a table")
    _no_unknown(where, f"{field}.", g, _GROUP)
    count = _int(where, f"{field}.count", g.get("count", 1), 1, MAX_REQUESTS)
    outs = _cycle(where, f"{field}.max_tokens", g.get("max_tokens"), 1)
    full = g.get("when_batch_full", False)
    if not isinstance(full, bool):
        raise ScenarioError(f"{where}: {field}.when_batch_full: must be true or false")
    common = Arrival(0.0, 0, 1, tenant=_tenant(where, field, g.get("tenant")),
                     priority=_int(where, f"{field}.priority", g.get("priority", 0), *PRIORITY_RANGE),
                     when_batch_full=full)
    if "prompt_len" in g:
        prompt = _synthetic(where, field, g)
    else:
        prompt = _text_prompts(where, field, g, g.get("system", system))
    return [dataclasses.replace(common, at_s=round(t, 3), max_tokens=outs[i % len(outs)],
                                **prompt(i, outs[i % len(outs)]))
            for i, t in enumerate(_times(where, field, g, count))]


def _synthetic(where: str, field: str, g: dict):
    """Token-id prompts of exact lengths (shown as "synthetic prompt, N tokens")."""
    if any(k in g for k in ("text", "prompts", "prompt_tokens")):
        raise ScenarioError(f"{where}: {field}.prompt_len: token-id prompts take no text, prompts or prompt_tokens")
    lens = _cycle(where, f"{field}.prompt_len", g.get("prompt_len"), 1)
    shared = _int(where, f"{field}.shared_prefix", g.get("shared_prefix", 0), 0, MAX_TOKENS)
    if shared and shared >= min(lens):
        raise ScenarioError(f"{where}: {field}.shared_prefix: must be shorter than every prompt_len")
    return lambda i, _: {"prompt_len": lens[i % len(lens)], "shared_prefix": shared}


def _text_prompts(where: str, field: str, g: dict, system: str | None):
    """Chat messages: one `text` for all, or bundled prompts whose answers run past max_tokens (`join`
    of them to a message), after an optional system message; `prompt_tokens` states the lesson's range."""
    if ("text" in g) == ("prompts" in g):
        raise ScenarioError(f"{where}: {field}: give prompt_len (token ids), text, or prompts = \"bundled\"")
    if "prompts" in g and g["prompts"] != "bundled":
        raise ScenarioError(f"{where}: {field}.prompts: the only set is \"bundled\" (assets/prompts.jsonl)")
    text = _text(where, f"{field}.text", g["text"]) if "text" in g else None
    join = _int(where, f"{field}.join", g.get("join", 1), 1, MAX_JOIN)
    stated = _cycle(where, f"{field}.prompt_tokens", g["prompt_tokens"], 1) if "prompt_tokens" in g else None
    if stated is not None and (len(stated) != 2 or stated[0] > stated[1]):
        raise ScenarioError(f"{where}: {field}.prompt_tokens: give the lesson's range [lowest, highest]")
    head = () if system is None else (("system", _text(where, f"{field}.system", system, MAX_SYSTEM_CHARS)),)

    def prompt(i: int, max_tokens: int) -> dict:
        try:
            user = text or message(bundled(), max_tokens, i, join)
        except ValueError as e:
            raise ScenarioError(f"{where}: {field}.max_tokens: {e}") from None
        return {"messages": (*head, ("user", user)), "prompt_tokens": stated and tuple(stated)}
    return prompt


def _times(where: str, field: str, g: dict, count: int) -> list[float]:
    at = _num(where, f"{field}.at_s", g.get("at_s", 0.0), MAX_SECONDS)
    if "poisson_rate" in g:
        rate = _num(where, f"{field}.poisson_rate", g["poisson_rate"], MAX_RATE)
        if rate <= 0 or "every_s" in g:
            raise ScenarioError(f"{where}: {field}.poisson_rate: must be > 0 (and not given with every_s)")
        rng = random.Random(_int(where, f"{field}.seed", g.get("seed", 0), 0, INT64[1]))
        times = []
        for _ in range(count):
            times.append(at)
            at += rng.expovariate(rate)
        return times
    every = _num(where, f"{field}.every_s", g.get("every_s", 0.0), MAX_SECONDS)
    return [at + i * every for i in range(count)]


def _static_batches(where: str, lanes: dict, n: int) -> None:
    # static launches full batches only: a stream that is not a multiple of its batch would leave
    # the last requests waiting for ever
    for name, o in lanes.items():
        size = o.get("static_batch_size", EngineConfig.static_batch_size)
        if o.get("strategy") == "static" and n % size:
            raise ScenarioError(f"{where}: requests.count: {n} arrivals in all; lane {name!r} is static with "
                                f"batches of {size}, so send a multiple of {size}")


def _cycle(where: str, field: str, value, low: int) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or len(values) > MAX_REQUESTS:
        raise ScenarioError(f"{where}: {field}: give an integer or a list of 1 to {MAX_REQUESTS} integers")
    return [_int(where, field, v, low, MAX_TOKENS) for v in values]


def _int(where: str, field: str, value, low: int, high: int) -> int:
    if not is_int(value) or not low <= value <= high:
        raise ScenarioError(f"{where}: {field}: must be an integer from {low} to {high}, got {value!r:.40}")
    return value


def _num(where: str, field: str, value, high: float) -> float:
    if not is_number(value) or not 0 <= value <= high:
        raise ScenarioError(f"{where}: {field}: must be a number from 0 to {high:g}, got {value!r:.40}")
    return float(value)


def _tenant(where: str, field: str, value) -> str | None:
    if value is None:
        return None
    return _text(where, f"{field}.tenant", value, MAX_TENANT_CHARS)
