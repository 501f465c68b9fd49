"""Parsing and checking OpenAI-style request bodies; building the response and chunk bodies.

Bad input raises ApiError, which the routes turn into an OpenAI-style error response.
Defaults follow OpenAI: temperature 1, top_p 1, max_tokens 16 for completions; chat
(which OpenAI leaves open-ended) gets DEFAULT_CHAT_MAX_TOKENS.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from .. import untrusted
from ..request import MAX_TENANT_CHARS, RequestOutput, SamplingParams, check_priority_tenant
from ..untrusted import is_int, is_number, shown

MAX_BODY_BYTES = 64 * 1024
DEFAULT_COMPLETION_MAX_TOKENS = 16
DEFAULT_CHAT_MAX_TOKENS = 256

# Fields we do not implement: accepted only at their "off" values, refused otherwise.
_UNSUPPORTED_UNLESS = {
    "logprobs": (None, False, 0), "top_logprobs": (None, 0), "echo": (None, False), "best_of": (None, 1),
    "suffix": (None, ""), "logit_bias": (None, {}), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
    "tools": (None, []), "functions": (None, []), "tool_choice": (None, "none", "auto"),
}


# body fields an error can be about (the engine calls the `user` a tenant)
PARAMS = ("model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "stop", "seed", "user", "priority", "lanes", "n", "stream", "stream_options", "ignore_eos",
          *_UNSUPPORTED_UNLESS)
_ALIASES = {"tenant": "user", "stop_token_ids": "stop"}


def param_of(message: str) -> str | None:
    """The body field an error message is about (messages start with it), or None."""
    first = message.split(" ", 1)[0].split(".", 1)[0].split("[", 1)[0].rstrip(":")
    first = _ALIASES.get(first, first)
    return first if first in PARAMS else None


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.param, self.type = message, status, param, type

    def body(self) -> dict:
        return error_body(self.message, self.type, self.param)


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": None}}


@dataclass
class ApiRequest:
    chat: bool
    prompt: str | list[int] | None
    messages: list[dict] | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    lanes: list[str] | None
    tag: str
    priority: int = 0          # extension (as in vLLM): lower runs first under the priority policy
    tenant: str | None = None  # `user` (its first MAX_TENANT_CHARS characters): the fair policy's tenant


def parse_json(raw: bytes) -> dict:
    try:
        body = untrusted.parse_json(raw, "the request body")
    except untrusted.JsonError as e:
        raise ApiError(str(e), param=e.path[0] if e.path and e.path[0] in PARAMS else None) from None
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_request(body: dict, chat: bool) -> ApiRequest:
    for name, off in _UNSUPPORTED_UNLESS.items():
        if name in body and body[name] not in off:
            raise ApiError(f"'{name}' is not supported by this server", param=name)
    _opt(body, "model", str, "a string")
    if _opt(body, "n", int, "an integer") not in (None, 1):
        raise ApiError("only n=1 is supported", param="n")
    prompt = messages = None
    if chat:
        messages = _messages(body.get("messages"))
        max_tokens = _opt(body, "max_completion_tokens", int, "an integer")
        if max_tokens is None:
            max_tokens = _opt(body, "max_tokens", int, "an integer")
    else:
        prompt = _prompt(body.get("prompt"))
        max_tokens = _opt(body, "max_tokens", int, "an integer")
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(f"max_tokens must be >= 1, got {max_tokens}", param="max_tokens")
    temperature = _opt(body, "temperature", float, "a number")
    if temperature is not None and not 0 <= temperature <= 2:
        raise ApiError(f"temperature must be between 0 and 2, got {temperature}", param="temperature")
    top_p = _opt(body, "top_p", float, "a number")
    if top_p is not None and not 0 < top_p <= 1:
        raise ApiError(f"top_p must be in (0, 1], got {top_p}", param="top_p")
    top_k = _opt(body, "top_k", int, "an integer")  # extension (as in vLLM)
    if top_k is not None and top_k < 0:
        raise ApiError(f"top_k must be >= 0 (0 disables it), got {top_k}", param="top_k")
    stop = body.get("stop")
    if not (stop is None or (isinstance(stop, str) and stop)
            or (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop))):
        raise ApiError(f"stop must be a non-empty string or a list of them, got {shown(stop)}", param="stop")
    params = SamplingParams(
        max_tokens=max_tokens or (DEFAULT_CHAT_MAX_TOKENS if chat else DEFAULT_COMPLETION_MAX_TOKENS),
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p, top_k=top_k or 0,
        seed=_opt(body, "seed", int, "an integer"), stop=stop or None,
        ignore_eos=bool(_opt(body, "ignore_eos", bool, "true or false")))
    try:
        params.validate()
    except ValueError as e:  # its message starts with the field's name
        raise ApiError(str(e), param=param_of(str(e))) from None
    stream = bool(_opt(body, "stream", bool, "true or false"))
    options = _opt(body, "stream_options", dict, "an object") or {}
    include_usage = bool(_opt(options, "include_usage", bool, "true or false", "stream_options.include_usage"))
    lanes = body.get("lanes")  # an extension: which lanes serve it (default: all running)
    if lanes is not None and not (isinstance(lanes, list) and lanes and all(isinstance(s, str) for s in lanes)):
        raise ApiError(f"lanes must be a non-empty list of lane names, got {shown(lanes)}", param="lanes")
    user = _opt(body, "user", str, "a string")
    tenant = user[:MAX_TENANT_CHARS] if user else None
    priority = _opt(body, "priority", int, "an integer") or 0
    try:
        check_priority_tenant(priority, tenant)
    except ValueError as e:  # about the tenant (the body's user) or the priority
        raise ApiError(str(e).replace("tenant", "user", 1), param=param_of(str(e))) from None
    tag = f"openai:{tenant}" if tenant else "openai"
    return ApiRequest(chat, prompt, messages, params, stream, include_usage, lanes, tag, priority, tenant)


def _opt(body: dict, name: str, kind: type, expected: str, param: str | None = None):
    """body[name] if present and of the right type, else None if absent/null; ApiError otherwise."""
    v = body.get(name)
    if v is None:
        return None
    ok = is_number(v) if kind is float else is_int(v) if kind is int else isinstance(v, kind)
    if not ok:
        raise ApiError(f"{param or name} must be {expected}, got {shown(v)}", param=param or name)
    return v


def _prompt(prompt) -> str | list[int]:
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) > 1:
            raise ApiError("only one prompt per request", param="prompt")
        prompt = prompt[0]  # ["text"] or [[ids]]
    if isinstance(prompt, str) or (isinstance(prompt, list) and all(
            is_int(t) for t in prompt)):
        return prompt
    raise ApiError(f"prompt must be a string or a list of token ids, got {shown(prompt)}", param="prompt")


def _messages(messages) -> list[dict]:
    """[{role, content}] with content a string or a list of text parts (joined)."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list of {role, content} objects", param="messages")
    out = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = "".join(_text_part(p, f"messages[{i}].content[{j}]") for j, p in enumerate(content))
        if not isinstance(role, str) or not role or not isinstance(content, str):
            raise ApiError(f"messages[{i}] must be an object with a string 'role' and a string 'content' "
                           f"(or a list of text parts), got {shown(m)}", param="messages")
        out.append({"role": role, "content": content})
    return out


def _text_part(part, where: str) -> str:
    if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
        raise ApiError(f"{where} must be a text part {{\"type\": \"text\", \"text\": ...}} (only text is "
                       f"supported), got {shown(part)}", param="messages")
    return part["text"]


# ---- response bodies --------------------------------------------------------------------------
def usage(out: RequestOutput) -> dict:
    p, c = len(out.prompt_token_ids), len(out.output_token_ids)
    # as OpenAI reports it: prompt tokens served from the prefix cache
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": out.num_cached_tokens}}


def response_id(req: ApiRequest, request_id: int) -> str:
    return f"{'chatcmpl' if req.chat else 'cmpl'}-{request_id}"


def completion_body(req: ApiRequest, request_id: int, model: str, out: RequestOutput) -> dict:
    if req.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": out.text}}
    else:
        choice = {"index": 0, "text": out.text}
    choice.update(logprobs=None, finish_reason=out.finish_reason)
    return {"id": response_id(req, request_id), "object": "chat.completion" if req.chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice], "usage": usage(out)}


def chunk_body(req: ApiRequest, request_id: int, model: str, text: str | None = None,
               finish_reason: str | None = None, role: bool = False, out: RequestOutput | None = None) -> dict:
    """One streamed chunk: text and/or finish_reason; or, with out, the usage-only chunk."""
    if out is not None:
        choices = []
    elif req.chat:
        delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    else:
        choices = [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}]
    body = {"id": response_id(req, request_id), "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": choices}
    if req.include_usage:
        body["usage"] = None if out is None else usage(out)
    return body
