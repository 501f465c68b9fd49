"""One-click comparisons: two lanes that differ in one idea, and a request stream that shows it.

Pure data (no Streamlit, no threads). A lane is written as overrides of the service's base config,
so the model, device and KV memory stay shared. Streams are token-id prompts of exact lengths, so
they can be fitted to any model's context (`Fit`); each is meant to show its difference with the
default model on a 2-core CPU within a minute or less.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from engine.lanes import lane_config

LONG_PROMPT = 1500  # tokens: the prompt that arrives mid-decode in the chunked-prefill stream
SYSTEM_PROMPT = 400  # tokens: the system prompt every request shares in the prefix-cache stream
SYSTEM_PROMPT_SEED = 10_007  # prompt_ids seed of that system prompt (no request's own seed)


@dataclass(frozen=True)
class Arrival:
    at_s: float        # seconds after the stream starts
    prompt_len: int    # prompt tokens
    max_tokens: int    # output tokens (EOS ignored)
    tenant: str | None = None  # whose request (the fair policy)
    priority: int = 0          # lower runs first (the priority policy)
    shared_prefix: int = 0     # leading prompt tokens every arrival of the stream shares (a system prompt)

    def prompt(self, seed: int) -> list[int]:
        """Token ids: the stream's shared system prompt, then tokens of this request's own."""
        shared = prompt_ids(self.shared_prefix, seed=SYSTEM_PROMPT_SEED)
        return shared + prompt_ids(self.prompt_len - self.shared_prefix, seed)


@dataclass(frozen=True)
class Fit:
    """What a stream must respect on the running lanes."""
    max_model_len: int      # prompt + output fit in this (the smallest of the lanes')
    static_batch_size: int  # static launches full batches only: streams send multiples of it


@dataclass(frozen=True)
class Stream:
    label: str                                  # the button
    explain: str                                # what is sent, one line
    arrivals: Callable[[Fit], list[Arrival]]

    def fitted(self, fit: Fit) -> list[Arrival]:
        """The arrivals, each shortened to fit the context (prompt first keeps at least 1 token)."""
        out = []
        for a in self.arrivals(fit):
            max_tokens = max(1, min(a.max_tokens, fit.max_model_len // 4))
            prompt_len = max(1, min(a.prompt_len, fit.max_model_len - max_tokens))
            out.append(dataclasses.replace(a, prompt_len=prompt_len, max_tokens=max_tokens,
                                           shared_prefix=min(a.shared_prefix, prompt_len - 1)))
        return out

    @property
    def presenter_only(self) -> bool:
        """Names tenants or priorities: a viewer is always its own tenant and may not ask for a
        priority below 0, so only the presenter's stream would show what it is made for."""
        return any(a.tenant is not None or a.priority != 0 for a in self.arrivals(Fit(2048, 8)))


@dataclass(frozen=True)
class Preset:
    name: str
    lanes: dict[str, dict]   # lane name -> overrides of the base config
    watch: str               # what to look at, one line
    stream: Stream

    def lane_configs(self, base) -> dict:
        return {name: lane_config(base, overrides) for name, overrides in self.lanes.items()}


def _mixed_lengths(fit: Fit) -> list[Arrival]:
    # Per static batch: one long answer and short ones. Static holds every row until the longest is
    # done and only then starts the next batch; continuous runs them all and frees each row at once.
    outputs = (96, 12, 20, 8, 16, 24, 10, 14)
    n = 2 * fit.static_batch_size
    return [Arrival(0.0, 24 + 4 * (i % 5), outputs[i % len(outputs)]) for i in range(n)]


def _trickle(fit: Fit) -> list[Arrival]:
    # One arrival every 0.5 s: dynamic launches what it has after its wait, and later arrivals wait
    # for that whole batch; continuous admits each at the next iteration.
    return [Arrival(0.5 * i, 32, 48 if i % 3 == 0 else 12) for i in range(12)]


def _long_prompt_mid_decode(fit: Fit) -> list[Arrival]:
    # 8 short requests decode; a long prompt arrives. Chunked: its prefill is split over several
    # iterations that keep decoding the 8. Not chunked: one long iteration stalls all 8.
    return [Arrival(0.0, 32, 64) for _ in range(8)] + [Arrival(1.5, LONG_PROMPT, 16)]


def _short_requests(fit: Fit) -> list[Arrival]:
    # Short prompts and answers: a 128-token block stays mostly empty, a 16-token block fills up.
    return [Arrival(0.25 * i, 20 + 10 * (i % 5), 16 + 6 * (i % 4)) for i in range(16)]


def _prompts_at_once(fit: Fit) -> list[Arrival]:
    # 8 prompts of 240 tokens at once: a 64-token budget prefills them chunk by chunk, one request
    # after another; a 2,048-token budget takes them all in one iteration.
    return [Arrival(0.0, 240, 24) for _ in range(8)]


def _many_at_once(fit: Fit) -> list[Arrival]:
    # 16 requests at once: max batch 4 serves them in waves of 4; max batch 32 all together.
    return [Arrival(0.0, 24, 24) for _ in range(16)]


def _long_ahead_of_short(fit: Fit) -> list[Arrival]:
    # Max batch 2: two short requests hold both slots; 3 long ones arrive, then 6 short ones. When
    # the slots free, FCFS starts the long ones and the short ones queue behind them (head-of-line
    # blocking); SJF starts the short ones. SJF's aging lets the long ones in once they have waited
    # 2 s, so the short ones ask 3 tokens: on the default model (2-core CPU) 5 of 6 start first.
    return ([Arrival(0.05 * i, 16, 8) for i in range(2)]
            + [Arrival(0.2 + 0.05 * i, 32, 64) for i in range(3)]
            + [Arrival(0.4 + 0.05 * i, 16, 3) for i in range(6)])


def _flood_and_few(fit: Fit) -> list[Arrival]:
    # Max batch 4: tenant "flood" sends 16 requests at once; "few" sends 3 from 1 s on. FCFS serves
    # few's requests after flood's whole backlog; fair gives each a slot at the next turn.
    return ([Arrival(0.0, 24, 16, tenant="flood") for _ in range(16)]
            + [Arrival(1.0 + 0.5 * i, 24, 16, tenant="few") for i in range(3)])


def _urgent_after_queue(fit: Fit) -> list[Arrival]:
    # Max batch 4: 12 requests at once (4 run, 8 queue), then at 1.5 s one with priority -1. FCFS
    # queues it behind the 8; priority starts it at once, preempting a running request.
    return [Arrival(0.0, 24, 24) for _ in range(12)] + [Arrival(1.5, 24, 24, priority=-1)]


def _shared_system_prompt(fit: Fit) -> list[Arrival]:
    # Every request: the same 400-token system prompt, then a 16-token question of its own. With the
    # cache on, only the first computes the system prompt; the others prefill their question alone.
    return [Arrival(0.6 * i, SYSTEM_PROMPT + 16, 16, shared_prefix=SYSTEM_PROMPT) for i in range(12)]


CONTINUOUS = {"strategy": "continuous"}


def _policies(size: int, *policies: str) -> dict[str, dict]:
    """Lanes named after their policy, alike in everything else (continuous, max batch `size`)."""
    return {p: {**CONTINUOUS, "max_num_seqs": size, "scheduling_policy": p} for p in policies}


PRESETS: tuple[Preset, ...] = (
    Preset("continuous vs static",
           {"continuous": CONTINUOUS, "static": {"strategy": "static"}},
           "Static's second batch queues until the first batch's longest answer is done, its finished rows "
           "held as padding; continuous serves all 16 at once and frees each row when it finishes.",
           Stream("Mixed lengths, 16 at once", "16 requests at once: two ask 96 tokens, the others 8 to 24 "
                  "(EOS ignored)", _mixed_lengths)),
    Preset("continuous vs dynamic",
           {"continuous": CONTINUOUS, "dynamic": {"strategy": "dynamic"}},
           "Dynamic launches whatever waited after its max wait; later arrivals queue for that whole batch. "
           "Continuous admits each request at the next iteration.",
           Stream("Trickle of 12", "12 requests, one every 0.5 s, answers of 12 or 48 tokens", _trickle)),
    Preset("chunked prefill on vs off",
           {"chunked on": {**CONTINUOUS, "enable_chunked_prefill": True, "max_num_batched_tokens": 256},
            "chunked off": {**CONTINUOUS, "enable_chunked_prefill": False, "max_num_batched_tokens": 2048}},
           "The long prompt's row: chunked splits its prefill into 256-token chunks, one per iteration, and "
           "the 8 short requests get a token after each; unchunked computes it in one long iteration (its "
           "budget must hold the whole prompt) while all 8 wait. Compare 'Longest token wait'.",
           Stream("8 decoding + a 1,500-token prompt", "8 short requests, then at 1.5 s one 1,500-token "
                  "prompt (shorter where the model's context is)", _long_prompt_mid_decode)),
    Preset("block size 16 vs 128",
           {"block 16": {**CONTINUOUS, "block_size": 16}, "block 128": {**CONTINUOUS, "block_size": 128}},
           "KV blocks: a short request takes a whole 128-token block and leaves most of it empty; "
           "with 16-token blocks the waste is under one small block per request. Compare KV waste.",
           Stream("16 short requests", "16 requests over 4 s, prompts of 20 to 60 tokens, answers of 16 to 34",
                  _short_requests)),
    Preset("token budget 64 vs 2,048",
           {"budget 64": {**CONTINUOUS, "enable_chunked_prefill": True, "max_num_batched_tokens": 64},
            "budget 2048": {**CONTINUOUS, "enable_chunked_prefill": True, "max_num_batched_tokens": 2048}},
           "Prefill: 64 tokens per iteration feeds the prompts in chunks, one request after another, so the "
           "last first token comes late; 2,048 takes every prompt in one iteration. Compare TTFT.",
           Stream("8 prompts of 240 tokens", "8 requests at once, 240-token prompts, 24-token answers",
                  _prompts_at_once)),
    Preset("max batch 4 vs 32",
           {"max batch 4": {**CONTINUOUS, "max_num_seqs": 4}, "max batch 32": {**CONTINUOUS, "max_num_seqs": 32}},
           "Max batch 4 serves the 16 requests in waves of 4 while the rest queue; 32 runs them together: "
           "fewer, bigger iterations. Compare throughput and TTFT.",
           Stream("16 at once", "16 requests at once, 24-token prompts, 24-token answers", _many_at_once)),
    Preset("FCFS vs SJF", _policies(2, "fcfs", "sjf"),
           "Gantt: which rows start once the first two finish. FCFS starts the long requests and the 6 "
           "short ones queue behind them; SJF starts the short ones first, until the long ones have waited "
           "2 s (its bound on starvation). Compare TTFT.",
           Stream("3 long ahead of 6 short", "Max batch 2: 2 short requests, then 3 asking 64 tokens, then "
                  "6 asking 3", _long_ahead_of_short)),
    Preset("FCFS vs fair", _policies(4, "fcfs", "fair"),
           "Gantt: the rows of tenant \"few\" (the last 3). FCFS starts them after all 16 of \"flood\"; "
           "fair starts each at the next free slot, ahead of flood's backlog.",
           Stream("Flood of 16 + 3 from another tenant", "Tenant flood sends 16 requests at once, tenant few "
                  "3 from 1 s on", _flood_and_few)),
    Preset("FCFS vs priority", _policies(4, "fcfs", "priority"),
           "Gantt: the last row (priority -1). FCFS starts it after the 8 queued requests; priority starts "
           "it at once, preempting a running request (recomputed later).",
           Stream("Queue of 12 + 1 urgent", "12 requests at once, then at 1.5 s one with priority -1",
                  _urgent_after_queue)),
    Preset("prefix cache off vs on",
           {"cache off": {**CONTINUOUS, "enable_prefix_caching": False},
            "cache on": {**CONTINUOUS, "enable_prefix_caching": True}},
           "Gantt: with the cache on, every request after the first skips the shared 400-token system prompt "
           "(drawn as served from the cache) and prefills only its question; KV map: the blocks they share. "
           "Off, each computes all 416 tokens. Compare TTFT.",
           Stream("12 requests, one system prompt", "12 requests, one every 0.6 s: the same 400-token system "
                  "prompt, then a 16-token question of their own", _shared_system_prompt)),
)
DEFAULT = PRESETS[0]


def by_name(name: str) -> Preset | None:
    return next((p for p in PRESETS if p.name == name), None)


def running_preset(lanes: dict, base) -> Preset | None:
    """The preset whose lanes are exactly what runs (names, order and settings), else None."""
    return next((p for p in PRESETS if list(lanes.items()) == list(p.lane_configs(base).items())), None)


def prompt_ids(n: int, seed: int) -> list[int]:
    """n token ids of a prompt: ordinary (non-special) ids in every model here, varied per request."""
    return [20 + (seed * 37 + 11 * k) % 200 for k in range(n)]
