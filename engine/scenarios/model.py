"""A scenario as data (no threads, no files): lanes written as overrides of the service's base config,
so the model, device and KV memory stay shared, and arrivals whose token-id prompts have exact
lengths, so they fit any model's context (`Fit`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from engine.lanes import lane_config

SYSTEM_PROMPT_SEED = 10_007  # prompt_ids seed of a stream's shared system prompt (no request's own seed)


@dataclass(frozen=True)
class Arrival:
    at_s: float        # seconds after the stream starts
    prompt_len: int    # prompt tokens (0 when the prompt is `text`)
    max_tokens: int    # output tokens (EOS ignored)
    tenant: str | None = None  # whose request (the fair policy)
    priority: int = 0          # lower runs first (the priority policy)
    shared_prefix: int = 0     # leading prompt tokens every arrival of the stream shares (a system prompt)
    text: str | None = None    # a user message instead of token ids

    def prompt(self, seed: int) -> list[int]:
        """Token ids: the stream's shared system prompt, then tokens of this request's own."""
        shared = prompt_ids(self.shared_prefix, seed=SYSTEM_PROMPT_SEED)
        return shared + prompt_ids(self.prompt_len - self.shared_prefix, seed)


@dataclass(frozen=True)
class Fit:
    """What a stream must respect on the running lanes: prompt + output fit in this context (the
    smallest of the lanes')."""
    max_model_len: int


@dataclass(frozen=True)
class Scenario:
    key: str                 # the file's name without its extension ("01-straggler")
    title: str               # the choice and the button
    lanes: dict[str, dict]   # lane name -> overrides of the base config
    watch: str               # what to look at, one line
    explain: str             # what is sent, one line
    arrivals: tuple[Arrival, ...]

    def fitted(self, fit: Fit) -> list[Arrival]:
        """The arrivals, each shortened to fit the context (the prompt keeps at least 1 token)."""
        out = []
        for a in self.arrivals:
            max_tokens = max(1, min(a.max_tokens, fit.max_model_len // 4))
            prompt_len = a.prompt_len and max(1, min(a.prompt_len, fit.max_model_len - max_tokens))
            out.append(dataclasses.replace(a, prompt_len=prompt_len, max_tokens=max_tokens,
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


def prompt_ids(n: int, seed: int) -> list[int]:
    """n token ids of a prompt: ordinary (non-special) ids in every model here, varied per request."""
    return [20 + (seed * 37 + 11 * k) % 200 for k in range(n)]
