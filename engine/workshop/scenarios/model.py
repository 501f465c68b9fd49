"""A scenario as data (no threads, no files): lanes written as overrides of the service's base config,
so the model, device and KV memory stay shared, and arrivals whose token-id prompts have exact
lengths, so they fit any model's context (`Fit`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from engine.serving.lanes import lane_config

SYSTEM_PROMPT_SEED = 10_007  # prompt_ids seed of a stream's shared system prompt (no request's own seed)


TEMPLATE_TOKENS = 48  # what a chat template adds around the messages (SmolLM2's default system line: 31)


@dataclass(frozen=True)
class Arrival:
    at_s: float        # seconds after the stream starts
    prompt_len: int    # token-id prompts: tokens (0 for chat messages)
    max_tokens: int    # output tokens (EOS ignored)
    tenant: str | None = None  # whose request (the fair policy)
    priority: int = 0          # lower runs first (the priority policy)
    shared_prefix: int = 0     # token-id prompts: leading tokens every arrival of the stream shares
    messages: tuple[tuple[str, str], ...] | None = None  # (role, text) chat messages instead of token ids
    prompt_tokens: tuple[int, int] | None = None  # the prompt lengths its lesson needs (default model)
    when_batch_full: bool = False  # sent at at_s or later, once every lane runs a full batch (runner.py)

    def chat(self) -> list[dict] | None:
        return None if self.messages is None else [{"role": r, "content": c} for r, c in self.messages]

    def prompt(self, seed: int) -> list[int]:
        """Token ids: the stream's shared system prompt, then tokens of this request's own."""
        shared = prompt_ids(self.shared_prefix, seed=SYSTEM_PROMPT_SEED)
        return shared + prompt_ids(self.prompt_len - self.shared_prefix, seed)


@dataclass(frozen=True)
class Fit:
    """What a stream must respect on the running lanes: prompt + output fit in this context (the
    smallest of the lanes'); count(messages): their tokens on the lanes' model, chat template included
    (None: unknown, e.g. only remote lanes)."""
    max_model_len: int
    count: Callable[[list[dict]], int] | None = None


@dataclass(frozen=True)
class Scenario:
    key: str                 # the file's name without its extension ("01-straggler")
    title: str               # the choice and the button
    lanes: dict[str, dict]   # lane name -> overrides of the base config
    watch: str               # what to look at, one line
    explain: str             # what is sent, one line
    arrivals: tuple[Arrival, ...]
    headline: tuple[str, ...] = ("duration_s", "ttft_p50_s")  # the live metrics its lesson is about, first first
    claims: tuple = ()       # what `watch` states, as checks a run can fail (claims.py)

    def fitted(self, fit: Fit) -> list[Arrival]:
        """The arrivals, each shortened to fit the context (the prompt keeps at least 1 token; chat
        messages keep their start): on the default model's context, as written."""
        out = []
        for a in self.arrivals:
            max_tokens = max(1, min(a.max_tokens, fit.max_model_len // 4))
            prompt_len = a.prompt_len and max(1, min(a.prompt_len, fit.max_model_len - max_tokens))
            messages = a.messages and _fit_messages(a, fit, fit.max_model_len - max_tokens)
            out.append(dataclasses.replace(a, prompt_len=prompt_len, max_tokens=max_tokens, messages=messages,
                                           shared_prefix=min(a.shared_prefix, max(0, prompt_len - 1))))
        return out

    @property
    def presenter_only(self) -> bool:
        """Names tenants or priorities: a viewer is always its own tenant and may not ask for a
        priority below 0, so only the presenter's stream would show what it is made for."""
        return any(a.tenant is not None or a.priority != 0 for a in self.arrivals)

    def lane_configs(self, base) -> dict:
        return {name: lane_config(base, overrides) for name, overrides in self.lanes.items()}

    def runs_on(self, lanes: dict, base) -> bool:
        """Whether `lanes` are exactly this scenario's (names, order and settings)."""
        return list(lanes.items()) == list(self.lane_configs(base).items())


def _fit_messages(a: Arrival, fit: Fit, room: int) -> tuple:
    """a's messages within `room` tokens: counted on the lanes' model and cut in proportion until they
    fit; without a counter, as stated (prompt_tokens) if that fits, else a character a token (enough for
    any tokenizer here: the tiny test models' bytes are the worst)."""
    messages = a.messages
    if fit.count is None:
        if a.prompt_tokens is not None and a.prompt_tokens[1] <= room:
            return messages
        each = max(8, room - TEMPLATE_TOKENS) // len(messages)
        return tuple((role, text[:each]) for role, text in messages)
    for _ in range(4):
        n = fit.count([{"role": r, "content": c} for r, c in messages])
        if n <= room:
            return messages
        keep = max(0.0, (room - TEMPLATE_TOKENS) / n) * 0.95
        messages = tuple((role, text[:max(1, int(len(text) * keep))]) for role, text in messages)
    return messages


def prompt_ids(n: int, seed: int) -> list[int]:
    """n token ids of a prompt: ordinary (non-special) ids in every model here, varied per request."""
    return [20 + (seed * 37 + 11 * k) % 200 for k in range(n)]
