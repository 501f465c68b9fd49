"""The /engine/ws protocol: JSON commands in, batched engine events out.

Client -> server, one JSON object per message (at most 64 KiB), "cmd" names it;
"ref" (optional: a number, or a string of at most 128 characters) is echoed in the reply:
  {"cmd": "subscribe", "lanes": ["continuous"] | null, "requests": [3, 4] | null, "kv": true,
   "from_seq": "oldest" | n}   (from_seq replays what the ring buffer still holds)
  {"cmd": "submit", "prompt": "text" | [ids] , "messages": [...], "params": {...},
   "lanes": [...], "tag": "ui", "priority": 0, "tenant": "team-a"}
      (priority: lower runs first under the priority policy, below 0 only for the presenter in a
       room; tenant: whose request, for the fair policy; a room's viewer is always its own tenant)
  {"cmd": "abort", "request_id": 3}
  {"cmd": "pause"} {"cmd": "resume"} {"cmd": "step"} {"cmd": "status"}
  {"cmd": "launch", "lanes": [...] | null}   (static/dynamic: launch what waits now, full batch or not)
  {"cmd": "slow_motion", "interval_s": 0.5}
  {"cmd": "configure", "changes": {"block_size": 8, ...}, "lanes": [...] | null}
  {"cmd": "lanes", "lanes": {"name": {"strategy": "static", "block_size": 128}, ...}}
      (the whole set of lanes: each one the base config with these fields changed)
  {"cmd": "auth", "token": "..."}   (room mode: the presenter token unlocks the control commands)
Server -> client:
  {"type": "hello", "status": {...}, "role": "presenter" | "viewer", "room": bool}
  {"type": "reply", "ref": ..., "ok": true, ...}   {"type": "error", "ref": ..., "message": "..."}
  {"type": "events", "first_seq": n, "last_seq": m, "skipped": k, "events": [...]}
While the service replays a recording, status carries "replay" (label, speed, paused, position,
start, end), the events are the recording's, only auth, subscribe, status, pause and resume are
answered, and the socket closes (code 1012) when the replay seeks or ends: reconnect and resubscribe.
"""
from __future__ import annotations

from ..events import StepMessage
from ..kv_wire import AS_IS, KEY, NO_KV
from ..request import SamplingParams
from ..untrusted import encodable, is_int, is_number, parse_json, shown
from ..wire_json import dumps

MAX_MESSAGE_BYTES = 64 * 1024
MAX_REF_CHARS = 128
COMMANDS = ("subscribe", "submit", "abort", "pause", "resume", "step", "launch", "status", "slow_motion",
            "configure", "lanes", "scenario", "auth")
# presenter only in a room
CONTROL_COMMANDS = ("pause", "resume", "step", "launch", "slow_motion", "configure", "lanes", "scenario")
PARAM_FIELDS = ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stop_token_ids", "ignore_eos")


class ProtocolError(ValueError):
    pass


def parse_command(text: str | bytes) -> dict:
    """Decode and check one client message; ProtocolError says what is wrong."""
    if len(text) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(text)} bytes is over the {MAX_MESSAGE_BYTES // 1024} KiB limit")
    try:
        msg = parse_json(text, "the command")
    except ValueError as e:
        raise ProtocolError(str(e)) from None
    if not isinstance(msg, dict):
        raise ProtocolError("a command must be a JSON object")
    cmd = msg.get("cmd")
    if cmd not in COMMANDS:
        raise ProtocolError(f"unknown cmd {shown(cmd)}; known: {', '.join(COMMANDS)}")
    ref = msg.get("ref")
    if not (ref is None or is_number(ref) or (isinstance(ref, str) and len(ref) <= MAX_REF_CHARS and encodable(ref))):
        raise ProtocolError(f"ref must be a number or a string of at most {MAX_REF_CHARS} characters")
    return msg


def lane_names(msg: dict) -> list[str] | None:
    """A command's `lanes` (names; None: all)."""
    names = msg.get("lanes")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ProtocolError("lanes must be a list of lane names or null")
    return names


def lane_specs(raw) -> dict[str, dict]:
    """The `lanes` command's {name: {EngineConfig field: value}}."""
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        raise ProtocolError('lanes must be an object {"lane name": {EngineConfig fields}, ...}')
    return raw


def sampling_params(raw) -> SamplingParams:
    if raw is None:
        return SamplingParams()
    if not isinstance(raw, dict):
        raise ProtocolError("params must be an object")
    unknown = sorted(set(raw) - set(PARAM_FIELDS))
    if unknown:
        raise ProtocolError(f"unknown sampling parameter {unknown[0]!r}; known: {', '.join(PARAM_FIELDS)}")
    p = SamplingParams(**raw)
    p.validate()
    return p


class Subscription:
    """What one client wants to see: lanes, token deltas of which requests, KV detail."""

    def __init__(self):
        self.lanes: set[str] | None = None       # None: all
        self.requests: set[int] | None = None    # None: deltas of every request
        self.kv = True

    def update(self, msg: dict):
        """Apply a subscribe command; returns its from_seq (None: keep the current cursor)."""
        lanes, requests, kv = lane_names(msg), msg.get("requests"), msg.get("kv", True)
        if requests is not None and not (isinstance(requests, list) and all(is_int(r) for r in requests)):
            raise ProtocolError("requests must be a list of request ids or null")
        if not isinstance(kv, bool):
            raise ProtocolError("kv must be true or false")
        self.lanes = None if lanes is None else set(lanes)
        self.requests = None if requests is None else set(requests)
        self.kv = kv
        from_seq = msg.get("from_seq")
        if from_seq is not None and from_seq != "oldest" and not (is_int(from_seq) and from_seq >= 0):
            raise ProtocolError('from_seq must be "oldest" or a sequence number >= 0')
        return from_seq

    def wants(self, event) -> bool:
        """Whether this client sees the event (service-wide events have no lane: everyone gets them)."""
        return self.lanes is None or event.lane is None or event.lane in self.lanes

    def view(self, event, kv_form: str = AS_IS) -> str:
        """The event's JSON text as this client should get it (a hub's event: an engine/events.py Event,
        or a replay's RecordedEvent); kv_form: how a step event's KV and rows go (engine/kv_wire.py KvSync:
        in its key form, tables and rows whole, even to a client that asked for no KV)."""
        if event.TYPE != StepMessage.TYPE:
            return event.json()
        keep_kv = self.kv and kv_form != NO_KV
        if keep_kv and self.requests is None:
            return event.key_json() if kv_form == KEY else event.json()
        out = dict(event.key_wire() if kv_form == KEY else event.wire())
        if not keep_kv:
            out.pop("kv", None)
        if self.requests is not None:
            out["deltas"] = {k: v for k, v in out.get("deltas", {}).items() if _id_of(k) in self.requests}
        return dumps(out)


def events_message(first_seq: int, last_seq: int, skipped: int, events: list[str]) -> str:
    """One `events` message from the events' JSON texts (each encoded once, for every client)."""
    return (f'{{"type":"events","first_seq":{first_seq},"last_seq":{last_seq},"skipped":{skipped},'
            f'"events":[{",".join(events)}]}}')


def _id_of(key: str) -> int | None:
    try:
        return int(key)
    except ValueError:
        return None

