"""Fuzzed input for every entry point: nasty values, and valid inputs with one part replaced by one.

Seeded and pure (everything comes from the random.Random it is given), so the soak harness
(`python -m engine.harness.soak`) and the property tests (where hypothesis drives the Random and shrinks
what fails) share one generator. A mutation says which field it broke, so a check can ask that the
error names it.
"""
from __future__ import annotations

import copy
import gzip
import json
import random
from dataclasses import dataclass

from ..untrusted import scrub

# ---- nasty values ----------------------------------------------------------------------------------
TEXTS = ("", " ", "\ud800", "x\udfffy", "\x00", "\u202e", "\ufeff", "\n" * 8, "🙂", "<img src=x onerror=alert(1)>",
         "![pwn](http://evil.example/x.png)", "**bold** [link](http://evil.example)", "$x^2$", ":red[alert]",
         "../../etc/passwd", "%s%n", "null", "{{MAX_TOKENS}}")
NUMBERS = (0, -1, 1, 3, 2**31, 2**53 + 1, 2**63, 2**64, 10**30, -(10**30), 1e308, -1e-308, 0.5, -0.0, True, False)


@dataclass(frozen=True)
class Raw:
    """JSON text placed as is: what json.dumps will not write (NaN, 1e999, a 5,000-digit number, deep nesting)."""
    text: str


RAWS = (Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("9" * 5000), Raw("[" * 40 + "]" * 40),
        Raw("[" * 5000 + "]" * 5000), Raw('{"a":' * 2000 + "1" + "}" * 2000))


def nasty(rng: random.Random, depth: int = 0):
    """One value a client should not send (or might, by mistake)."""
    kind = rng.randrange(6 if depth < 2 else 4)
    if kind == 0:
        return rng.choice(TEXTS) if rng.random() < 0.8 else rng.choice("ab\ud800") * rng.choice((65, 1001, 70_000))
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return rng.choice(RAWS)
    if kind == 3:
        return rng.choice((None, [], {}, [0] * 10_000))
    if kind == 4:
        return [nasty(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    return {rng.choice(TEXTS + ("k",)): nasty(rng, depth + 1)}


def to_text(value) -> str:
    """JSON text of value, with Raw pieces spliced in as written."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{to_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_text(v) for v in value) + "]"
    return json.dumps(value)


# ---- one part of a valid input replaced ----------------------------------------------------------------
@dataclass
class Fuzzed:
    text: str            # the input as sent
    field: str | None    # the key whose value was broken, removed or added (None: the whole input is garbage)
    inner: tuple = ()    # keys inside the value put there (an error may name one of them instead)

    def named_by(self, message: str) -> bool:
        """Whether an error message names what was broken (as is, quoted, escaped or repaired)."""
        return self.field is None or any(form in message for k in (self.field, *self.inner)
                                         for form in (k, repr(k), ascii(k)[1:-1], json.dumps(k)[1:-1], scrub(k)))


def mutate(rng: random.Random, base: dict, keep: tuple = ()) -> Fuzzed:
    """base with one value (at any depth; not a top-level key in `keep`) replaced by a nasty one, or a key
    removed, or an unknown key added; as JSON text."""
    value, field, inner = mutated(rng, base, keep)
    return Fuzzed(to_text(value), field, inner)


def mutated(rng: random.Random, base: dict, keep: tuple = ()) -> tuple[dict, str | None, tuple]:
    """(the mutated copy of base, the key it broke, the keys inside what replaced its value)."""
    value = copy.deepcopy(base)
    path = _path(rng, value, keep)
    *parents, last = path
    holder = value
    for p in parents:
        holder = holder[p]
    action = rng.random()
    if action < 0.1 and isinstance(holder, dict):
        del holder[last]
    else:
        if action < 0.18 and isinstance(holder, dict):
            last = rng.choice(("bogus", "\ud800", "<b>x</b>"))
        holder[last] = nasty(rng)
    keys = [p for p in (*parents, last) if isinstance(p, str)]
    return value, (keys[-1] if keys else None), _keys_in(holder.get(last) if isinstance(holder, dict) else None)


def _keys_in(value) -> tuple:
    out, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out += [str(k) for k in node]
            stack += node.values()
        elif isinstance(node, list):
            stack += node
    return tuple(out)


def _path(rng: random.Random, value, keep: tuple) -> list:
    path, node = [], value
    while True:
        keys = [k for k in (node if isinstance(node, dict) else range(len(node))) if not (not path and k in keep)]
        if not keys:
            return path or [next(iter(node))]
        key = rng.choice(keys)
        path.append(key)
        child = node[key]
        if not isinstance(child, (dict, list)) or not child or rng.random() < 0.5:
            return path
        node = child


def garbage(rng: random.Random) -> Fuzzed:
    """An input that is not a JSON object at all."""
    text = rng.choice(("", "{", "[]", "null", '"text"', "{not json", "x" * 70_000, *(r.text for r in RAWS)))
    return Fuzzed(text, None)


# ---- per entry point -------------------------------------------------------------------------------------
SOCKET_COMMANDS = (
    {"cmd": "submit", "prompt": "Say hi", "params": {"max_tokens": 4, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                                                     "seed": 1, "stop": ["\n"], "stop_token_ids": [2],
                                                     "ignore_eos": False},
     "lanes": None, "tag": "fuzz", "priority": 0, "tenant": "team", "ref": 1},
    {"cmd": "submit", "messages": [{"role": "user", "content": "Say hi"}], "params": {"max_tokens": 3}, "tag": "fuzz"},
    {"cmd": "submit", "prompt": [5, 6, 7], "params": {"max_tokens": 2}},
    {"cmd": "subscribe", "lanes": None, "requests": None, "kv": True, "from_seq": "oldest"},
    {"cmd": "abort", "request_id": 0},
    {"cmd": "status", "ref": "x"},
)
CONTROL_COMMANDS = (  # what a presenter sends: fuzzed by a viewer, who must be refused whatever they hold
    {"cmd": "slow_motion", "interval_s": 0.5}, {"cmd": "configure", "changes": {"max_num_seqs": 8}, "lanes": None},
    {"cmd": "lanes", "lanes": {"a": {"strategy": "static"}}}, {"cmd": "scenario", "number": 1}, {"cmd": "pause"})
OPENAI_BODIES = (
    ("/v1/completions", {"model": "m", "prompt": "Say hi", "max_tokens": 4, "temperature": 0, "top_p": 1, "top_k": 0,
                         "stop": ["\n"], "seed": 3, "user": "team", "priority": 0, "stream": False,
                         "stream_options": {"include_usage": True}, "ignore_eos": False, "n": 1, "lanes": None}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                              "max_tokens": 3, "stream": True, "user": "team"}),
    ("/v1/completions", {"prompt": [[5, 6, 7]], "max_tokens": 2}),
)
JOIN_BODY = {"name": "Ada", "prompt": "Say hi"}


def socket_frame(rng: random.Random, commands=SOCKET_COMMANDS) -> Fuzzed:
    if rng.random() < 0.1:
        return garbage(rng)
    return mutate(rng, rng.choice(commands), keep=("cmd",))


def openai_request(rng: random.Random) -> tuple[str, Fuzzed]:
    path, body = rng.choice(OPENAI_BODIES)
    return path, (garbage(rng) if rng.random() < 0.1 else mutate(rng, body))


def join_body(rng: random.Random) -> Fuzzed:
    return garbage(rng) if rng.random() < 0.1 else mutate(rng, JOIN_BODY)


# ---- recordings ------------------------------------------------------------------------------------------
def recording(rng: random.Random, lines: list[str]) -> tuple[bytes, int | None]:
    """A gzip recording made from a valid one's lines with one thing wrong; and the line it is on (None:
    the file as a whole, or nothing wrong after all)."""
    lines = list(lines)
    kind = rng.randrange(6)
    if kind == 0:   # one line's value replaced (header or event)
        n = rng.randrange(len(lines))
        lines[n] = mutate(rng, json.loads(lines[n])).text
        return gzip.compress("\n".join(lines).encode()), n + 1
    if kind == 1:   # a line that is not an event line at all
        n = rng.randrange(1, len(lines))
        lines[n] = garbage(rng).text or "[]"
        return gzip.compress("\n".join(lines).encode()), n + 1
    if kind == 2:   # cut short
        data = gzip.compress("\n".join(lines).encode())
        return data[: rng.randrange(len(data))], None
    if kind == 3:   # not gzip
        return rng.choice((b"", b"PK\x03\x04 a zip", "\n".join(lines[:3]).encode())), None
    if kind == 4:   # a bomb: a few hundred KB that expand past a bound (events, bytes, or one line's length)
        if rng.random() < 0.5:
            return gzip.compress("\n".join([lines[0]] + [lines[-1]] * 300_000).encode()), None
        huge = json.dumps({"t": 1e9, "event": {"type": "status", "event": "x" * 9_000_000}})
        return gzip.compress("\n".join([lines[0], huge]).encode()), None
    return gzip.compress("\n".join(lines).encode()), None  # nothing wrong


# ---- scenario files ------------------------------------------------------------------------------------
def scenario_toml(rng: random.Random, base: dict) -> Fuzzed:
    """A scenario (as its TOML table) with one value broken, written back as TOML."""
    value, field, inner = mutated(rng, base)
    return Fuzzed(toml_text(value), field, inner)


def toml_text(table: dict) -> str:
    """TOML of a scenario-shaped table: scalars, then [lanes.NAME] tables, then [[requests]] groups and [[claims]] (a Raw
    value is written as its text: mostly not TOML at all)."""
    out, tables = [], []
    for k, v in table.items():
        if k in ("lanes", "requests", "claims") and isinstance(v, (dict, list)) and v:
            tables.append((k, v))
        else:
            out.append(f"{_key(k)} = {_toml_value(v)}")
    for k, v in tables:
        if isinstance(v, dict):
            for name, lane in v.items():
                out.append(f"[{_key(k)}.{_key(name)}]")
                out += [f"{_key(a)} = {_toml_value(b)}" for a, b in (lane.items() if isinstance(lane, dict) else [])]
        else:
            for group in v:
                out.append(f"[[{_key(k)}]]")
                out += [f"{_key(a)} = {_toml_value(b)}" for a, b in (group.items() if isinstance(group, dict) else [])]
    return "\n".join(out) + "\n"


def _key(k) -> str:
    return json.dumps(str(k))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
    if isinstance(v, (int, str)):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(a)} = {_toml_value(b)}" for a, b in v.items()) + "}"
    if isinstance(v, Raw):
        return v.text
    return '""'
