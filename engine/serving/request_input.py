"""What a submission may carry, checked once as it enters the service (EngineService.submit, which the
socket, the API, /join, scenarios and the pages all go through): its prompt or chat messages and its
tag. Sampling parameters, priority and tenant are checked by engine/request.py, names by
engine/room/participants.py. After this the text is valid Unicode of bounded size, so no event built from
it can fail to encode.
"""
from __future__ import annotations

from ..untrusted import is_int, shown, text

MAX_TAG_CHARS = 80            # "openai:" + a 64-character tenant fits
MAX_PROMPT_CHARS = 1_000_000  # the model's context refuses far less; this bounds the tokenizer's work
MAX_PROMPT_TOKENS = 1_000_000
MAX_MESSAGES = 256
MAX_ROLE_CHARS = 32


def checked_prompt(prompt, messages) -> tuple[str | list[int] | None, list[dict] | None]:
    """(prompt, messages) as the engines get them: exactly one given; a prompt is text or token ids;
    messages are [{role, content}] with nothing else kept. ValueError naming the field."""
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt or messages")
    if messages is not None:
        return None, checked_messages(messages)
    if isinstance(prompt, str):
        return text(prompt, "prompt", MAX_PROMPT_CHARS, empty=True), None
    if isinstance(prompt, (list, tuple)) and len(prompt) <= MAX_PROMPT_TOKENS and all(is_int(t) for t in prompt):
        return list(prompt), None
    raise ValueError(f"prompt must be a string or a list of token ids, got {shown(prompt)}")


def checked_messages(messages) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not 0 < len(messages) <= MAX_MESSAGES:
        raise ValueError(f"messages must be a list of 1 to {MAX_MESSAGES} {{role, content}} objects, "
                         f"got {shown(messages)}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be an object with a role and a content, got {shown(m)}")
        out.append({"role": text(m.get("role"), f"messages[{i}].role", MAX_ROLE_CHARS),
                    "content": text(m.get("content"), f"messages[{i}].content", MAX_PROMPT_CHARS, empty=True)})
    return out


def check_tag(tag) -> str:
    return text(tag, "tag", MAX_TAG_CHARS)
