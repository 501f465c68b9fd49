"""The event contract as checks: what a wire event must hold for every view to draw it.

A recording is untrusted input (an upload): each of its events is checked here before it replaces the
live stream. The checks come from the contract's own definitions (engine/events.py: each event's
dataclass fields and their types; a step event's shape from StepEvent.to_dict and StepEntry), so a
field added there is checked here without being written twice. Fields with a default may be missing
(recordings made before they existed); unknown fields are refused.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from .events import DECODE_PART, EVENTS, PHASES, PREFILL_PART, SHORT_ENTRY, SWAP_IN, SWAP_OUT, StepEntry, StepMessage
from .untrusted import encodable, is_int, is_number

MAX_TEXT_CHARS = 1_000_000
MAX_SAFE_INT = 2**53  # what a browser's numbers hold exactly


# ---- checks of one value: check(value, path) raises ValueError naming the path -------------------
def _int(v, path: str) -> None:
    if not is_int(v) or abs(v) > MAX_SAFE_INT:
        raise ValueError(f"{path} must be an integer, got {type(v).__name__}")


def _num(v, path: str) -> None:
    if not is_number(v):
        raise ValueError(f"{path} must be a number, got {type(v).__name__}")


def _str(v, path: str) -> None:
    if not isinstance(v, str) or len(v) > MAX_TEXT_CHARS:
        raise ValueError(f"{path} must be a string of at most {MAX_TEXT_CHARS} characters")
    if not encodable(v):
        raise ValueError(f"{path} is not valid Unicode text")


def _bool(v, path: str) -> None:
    if not isinstance(v, bool):
        raise ValueError(f"{path} must be true or false")


def check_json(v, path: str) -> None:
    """Any JSON value whose text (keys included) is valid Unicode and within bounds."""
    stack = [(v, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            _str(node, where)
        elif isinstance(node, dict):
            for k, x in node.items():
                _str(k, f"{where} (a key)")
                stack.append((x, f"{where}.{k}"))
        elif isinstance(node, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(node))


def _optional(check):
    def opt(v, path: str) -> None:
        if v is not None:
            check(v, path)
    return opt


def _list(item):
    def check(v, path: str) -> None:
        if not isinstance(v, list):
            raise ValueError(f"{path} must be a list, got {type(v).__name__}")
        for i, x in enumerate(v):
            item(x, f"{path}[{i}]")
    return check


def _map(key, value):
    def check(v, path: str) -> None:
        if not isinstance(v, dict):
            raise ValueError(f"{path} must be an object, got {type(v).__name__}")
        for k, x in v.items():
            key(k, f"{path} (key {k!r:.40})")
            value(x, f"{path}.{k}")
    return check


def _id_key(k, path: str) -> None:
    """A request or block id as an object key (JSON keys are strings)."""
    if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 16):
        raise ValueError(f"{path} must be an id")


def _object(fields: dict, required: frozenset = frozenset()):
    def check(v, path: str) -> None:
        if not isinstance(v, dict):
            raise ValueError(f"{path} must be an object, got {type(v).__name__}")
        unknown = next((k for k in v if k not in fields), None)
        if unknown is not None:
            raise ValueError(f"{path}: unknown field {unknown!r:.40}")
        missing = next((k for k in required if k not in v), None)
        if missing is not None:
            raise ValueError(f"{path}: {missing} is missing")
        for k, x in v.items():
            fields[k](x, f"{path}.{k}" if path else k)
    return check


# ---- from the contract's types ---------------------------------------------------------------------
def _of_type(hint):
    """The check of a field from its annotation (int, float, str, bool, X | None, list[...], dict[str, ...])."""
    simple = {int: _int, float: _num, str: _str, bool: _bool, Any: check_json, list: _list(check_json),
              dict: _map(_str, check_json)}
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        check = _of_type(inner[0]) if len(inner) == 1 else check_json
        return _optional(check) if len(inner) < len(args) else check
    if origin is list:
        return _list(_of_type(args[0]))
    if origin is dict:
        return _map(_of_type(args[0]), _of_type(args[1]))
    raise TypeError(f"no check for {hint!r}")


def _dataclass_fields(cls, skip=()) -> tuple[dict, frozenset]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: _of_type(hints[f.name]) for f in dataclasses.fields(cls) if f.name not in skip}
    required = frozenset(f.name for f in dataclasses.fields(cls) if f.name not in skip
                         and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    return fields, required


def _phase(v, path: str) -> None:
    if v not in PHASES:
        raise ValueError(f"{path} must be one of {', '.join(PHASES)}")


_ENTRY_FIELDS, _ENTRY_REQUIRED = _dataclass_fields(StepEntry)
_ENTRY_FIELDS["phase"] = _phase


def _entry(v, path: str) -> None:
    """A step entry: a list in ENTRY_FIELDS order (StepEntry's fields; the later ones may be left off), or a
    plain decode row's short one (SHORT_ENTRY)."""
    if isinstance(v, list) and len(v) == len(SHORT_ENTRY):
        for name, x in zip(SHORT_ENTRY, v):
            _ENTRY_FIELDS[name](x, f"{path}.{name}")
        return
    if not isinstance(v, list) or not len(_ENTRY_REQUIRED) <= len(v) <= len(_ENTRY_FIELDS):
        raise ValueError(f"{path} must be [{', '.join(SHORT_ENTRY)}] or a list of {len(_ENTRY_REQUIRED)} to "
                         f"{len(_ENTRY_FIELDS)} values: {', '.join(_ENTRY_FIELDS)}")
    for (name, check), x in zip(_ENTRY_FIELDS.items(), v):
        check(x, f"{path}.{name}")


def _swap(v, path: str) -> None:
    """A swap preemption copy: [request id, "out" | "in", blocks]."""
    if not (isinstance(v, list) and len(v) == 3 and v[1] in (SWAP_OUT, SWAP_IN)):
        raise ValueError(f'{path} must be [request id, "{SWAP_OUT}" or "{SWAP_IN}", blocks]')
    _int(v[0], f"{path}.request_id")
    _int(v[2], f"{path}.blocks")


def _handoff(v, path: str) -> None:
    """A disaggregated lane's KV hand-off: [request id, blocks, bytes, seconds]."""
    if not (isinstance(v, list) and len(v) == 4):
        raise ValueError(f"{path} must be [request id, blocks, bytes, seconds]")
    _int(v[0], f"{path}.request_id")
    _int(v[1], f"{path}.blocks")
    _int(v[2], f"{path}.bytes")
    _num(v[3], f"{path}.seconds")


def _part(v, path: str) -> None:
    if v not in (PREFILL_PART, DECODE_PART):
        raise ValueError(f'{path} must be "{PREFILL_PART}" or "{DECODE_PART}"')


def _table_change(v, path: str) -> None:
    """A KV delta's change of one table (engine/kv_wire.py): [start, blocks appended...]."""
    if not (isinstance(v, list) and v and is_int(v[0]) and v[0] >= 0):
        raise ValueError(f"{path} must be [start, blocks...] with start >= 0")
    _list(_int)(v, path)


_KV_FIELDS = {"num_blocks": _int, "block_size": _int, "used": _int, "reserved_unused_slots": _int,
              "cached": _list(_int)}
_KV_REQUIRED = frozenset({"num_blocks", "block_size", "used"})
_KV_KEY = _object({**_KV_FIELDS, "block_tables": _map(_id_key, _list(_int)), "kv_tokens": _map(_id_key, _int)},
                  _KV_REQUIRED | {"block_tables"})
_KV_CHANGES = _object({**_KV_FIELDS, "tables": _map(_id_key, _optional(_table_change)),
                       "kv_tokens": _map(_id_key, _optional(_int))}, _KV_REQUIRED | {"tables"})


def _kv(v, path: str) -> None:
    """A step's KV: its tables whole (a key frame) or the changes since its engine's previous step."""
    (_KV_CHANGES if isinstance(v, dict) and "tables" in v else _KV_KEY)(v, path)


def _sampled(v, path: str) -> None:
    """The requests a step sampled for beside its short entries (with `unsampled`), or all of them (older
    recordings: their ids, or id -> token id)."""
    (_map(_id_key, _int) if isinstance(v, dict) else _list(_int))(v, path)


def _run(v, path: str) -> None:
    """A run of rows that go on from the pool's previous step: [at, from, n] (engine/events.py continued_rows)."""
    if not (isinstance(v, list) and len(v) == 3):
        raise ValueError(f"{path} must be [at, from, n]")
    for name, x in zip(("at", "from", "n"), v):
        _int(x, f"{path}.{name}")
        if x < 0:
            raise ValueError(f"{path}.{name} must not be negative")


# StepEvent.to_dict() plus what StepMessage adds (its lane, deltas and roofline)
_STEP_FIELDS = {
    "type": _str, "step": _int, "strategy": _str, "t_start": _num, "t_end": _num, "entries": _list(_entry),
    "cont": _list(_run),
    "num_waiting": _int, "num_running": _int, "admitted": _list(_int), "finished": _list(_int),
    "preempted": _list(_int), "tokens_used": _int, "token_budget": _int, "kv": _kv, "prefix_queries": _int,
    "prefix_hits": _int, "sampled": _sampled, "unsampled": _list(_int), "lane": _optional(_str),
    "deltas": _map(_id_key, _str), "roofline": _optional(_map(_str, _optional(_num))),
    "waits": _map(_id_key, _optional(_map(_str, check_json))),
    "swaps": _list(_swap), "swap_bytes": _int, "swap_s": _num,
    "host": _object({"num_blocks": _int, "same_ram": _bool, "block_tables": _map(_id_key, _list(_int))},
                    frozenset({"num_blocks"})),
    "part": _part, "handed_off": _list(_int), "handoffs": _list(_handoff),
    "answer_ends": _map(_id_key, _int),
}
_STEP_REQUIRED = frozenset({"type", "step", "t_start", "t_end", "entries", "num_waiting", "num_running", "kv"})


def _step(v, path: str) -> None:
    """A step event; one with its tables whole (a key frame, where a reader starts) sends its rows whole."""
    _object(_STEP_FIELDS, _STEP_REQUIRED)(v, path)
    if v.get("cont") and isinstance(v["kv"], dict) and "tables" not in v["kv"]:
        raise ValueError(f"{path}.cont: a step with its tables whole sends its rows whole")


def _event_check(cls):
    if cls is StepMessage:
        return _step
    fields, required = _dataclass_fields(cls)
    return _object({"type": _str, **fields}, required | {"type"})


CHECKS = {cls.TYPE: _event_check(cls) for cls in EVENTS}


def check_event(event, path: str = "event") -> None:
    """ValueError naming the first thing in `event` that the contract does not allow."""
    if not isinstance(event, dict):
        raise ValueError(f"{path} must be an object, got {type(event).__name__}")
    kind = event.get("type")
    if not isinstance(kind, str) or kind not in CHECKS:
        raise ValueError(f"{path}.type must be one of {', '.join(CHECKS)}, got {kind!r:.40}")
    CHECKS[kind](event, path)
