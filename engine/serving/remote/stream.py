"""One request to an OpenAI-compatible server as a streaming completion: the body we send, and the
server-sent events we read back as chunks.

Text prompts and token-id prompts go to /completions (`prompt` is a string or a list of ints, as the
API allows); chat messages to /chat/completions. Sampling fields beyond OpenAI's (top_k, ignore_eos,
stop_token_ids; vLLM and SGLang take them) are sent only when set.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from ...untrusted import parse_json, scrub
from .bounded import KiB, MiB, TooMuch, read_body, read_lines

FINISH_REASONS = ("stop", "length", "abort")
MAX_ERROR_CHARS = 300
MAX_ERROR_BYTES = 64 * KiB     # of an error body (its message is cut at MAX_ERROR_CHARS anyway)
MAX_LINE_BYTES = 1 * MiB       # one server-sent event's line (a chunk of a token or a few, with logprobs)
MAX_CHARS_PER_TOKEN = 256      # more text than this per token asked for is not an answer to the request
BYTES_PER_TOKEN = 64 * KiB     # a response's bytes: 1 MiB, plus this per token asked for


class RemoteError(Exception):
    """The server answered, but not with a completion (HTTP error, error event, broken stream)."""


@dataclass
class Chunk:
    text: str = ""
    finish_reason: str | None = None
    usage: dict | None = None


def request(cfg, sub) -> tuple[str, dict]:
    """(path, JSON body) of one Submission for the server in cfg (a RemoteConfig)."""
    p = sub.params
    body = {"model": cfg.model, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p}
    optional = {"top_k": p.top_k or None, "seed": p.seed, "stop": p.stop_strings() or None,
                "stop_token_ids": p.stop_token_ids or None, "ignore_eos": p.ignore_eos or None,
                "priority": sub.priority or None, "user": sub.tenant}
    body.update({k: v for k, v in optional.items() if v is not None})
    if sub.messages is not None:
        return "/chat/completions", {**body, "messages": sub.messages}
    return "/completions", {**body, "prompt": sub.prompt}


async def stream(client: httpx.AsyncClient, cfg, sub) -> AsyncIterator[Chunk]:
    """The server's chunks, in order; RemoteError if it refuses, reports an error, ends the stream before
    the request finished, or sends more than the request asked for (TooMuch: more pieces of text than
    max_tokens, more text than they can hold, an over-long line or response). httpx's own errors
    (connect, timeout, dropped connection) pass through."""
    path, body = request(cfg, sub)
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    async with client.stream("POST", cfg.remote + path, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise RemoteError(f"HTTP {resp.status_code}: {await _error_body(resp)}")
        finished, answer = False, _Answer(sub.params.max_tokens)
        lines = read_lines(resp, MAX_LINE_BYTES, MiB + sub.params.max_tokens * BYTES_PER_TOKEN, "the stream")
        async for line in lines:
            data = line[5:].strip() if line.startswith("data:") else None
            if data == "[DONE]":
                break
            if data:
                chunk = answer.check(_chunk(data))
                finished = finished or chunk.finish_reason is not None
                yield chunk
        if not finished:
            raise RemoteError("the server ended the stream before the request finished")


class _Answer:
    """What a request asked for, held against what the server streams."""

    def __init__(self, max_tokens: int):
        self.max_tokens, self.pieces, self.chars = max_tokens, 0, 0

    def check(self, chunk: Chunk) -> Chunk:
        if chunk.text:
            self.pieces += 1
            self.chars += len(chunk.text)
            if self.pieces > self.max_tokens:
                raise TooMuch(f"the server streamed more pieces of text than max_tokens={self.max_tokens}")
            if self.chars > self.max_tokens * MAX_CHARS_PER_TOKEN:
                raise TooMuch(f"the server streamed more text than max_tokens={self.max_tokens} can hold "
                              f"({MAX_CHARS_PER_TOKEN} characters a token)")
        return chunk


async def _error_body(resp: httpx.Response) -> str:
    try:
        return _error_text(await read_body(resp, MAX_ERROR_BYTES, "its error body"))
    except TooMuch as e:
        return str(e)


def _chunk(data: str) -> Chunk:
    try:
        obj = parse_json(data, "the chunk")
    except ValueError:
        raise RemoteError(f"the server sent a chunk that is not JSON: {data[:MAX_ERROR_CHARS]!r}") from None
    if not isinstance(obj, dict):
        raise RemoteError(f"the server sent a chunk that is not an object: {data[:MAX_ERROR_CHARS]!r}")
    if obj.get("error"):
        raise RemoteError(f"the server reported an error: {_message(obj)}")
    out = Chunk(usage=obj.get("usage") if isinstance(obj.get("usage"), dict) else None)
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        text = choice.get("text", delta.get("content"))
        out.text += scrub(text) if isinstance(text, str) else ""  # relayed, so repaired rather than refused
        if choice.get("finish_reason"):
            reason = choice["finish_reason"]
            out.finish_reason = reason if reason in FINISH_REASONS else "stop"  # tool_calls, content_filter, ...
    return out


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    try:
        return _message(parse_json(text, "the error"))
    except (ValueError, AttributeError, TypeError):
        return text[:MAX_ERROR_CHARS] or "(empty body)"


def _message(obj: dict) -> str:
    """An OpenAI-style error body's message ({"error": {"message": ...}} or {"error": "..."})."""
    err = obj.get("error", obj)
    msg = err.get("message") if isinstance(err, dict) else err
    return scrub(str(msg if msg is not None else obj)[:MAX_ERROR_CHARS])
