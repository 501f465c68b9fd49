"""Benchmark workloads: who arrives when, with which prompt, asking for how many tokens.

A `Workload` is a list of `RequestSpec`s plus the knobs that made it. It is built
from a `WorkloadSpec` by `make_workload()` (seeded: the same spec gives the same
workload, on any machine), taken from a named preset (`preset()`), or replayed
from a JSONL trace (`load_trace()` / `save_trace()`).

Prompts are either real (user messages from the bundled `assets/prompts.jsonl`, or
`assets/edit_prompts.jsonl` for "edit": copy or edit a given passage, where speculative decoding's
lookup pays; sent through the model's chat template) or synthetic (a token length; random
non-special token ids are drawn when the workload is materialized for a
tokenizer), optionally behind a prefix of `shared_prefix_len` ids common to every
request (a system prompt). `materialize()` turns every prompt into token ids, once,
so every strategy runs exactly the same ids.

A workload may be a mix of `RequestClass`es (synthetic): each class has its own
count and lengths and labels its requests with `cls` ("short"/"long", for per-class
metrics), `tenant` and `priority` (passed to `LLMEngine.add_request`). Requests are
numbered class by class in the order listed, which is the arrival order of requests
that arrive at the same time.

Randomness comes from independent streams derived from the seed (prompts,
output lengths, arrivals), so changing the arrival rate keeps the prompts and
the output lengths, which is what a throughput-latency sweep needs.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..workshop.prompts import EDIT_PROMPTS_PATH, PROMPTS_PATH, load_prompts

PROMPT_SETS = {"real": PROMPTS_PATH, "edit": EDIT_PROMPTS_PATH}  # WorkloadSpec.prompts -> bundled file

TRACE_KIND = "inflight-workload"
TRACE_VERSION = 1


# ---------------------------------------------------------------------------- distributions

@dataclass(frozen=True)
class Lengths:
    """A token-length distribution.

    kind "fixed": always `value`; "uniform": integer uniform in [low, high];
    "exponential": round(Exp(mean)) clipped to [1, cap] (the Anyscale study's output
    lengths: mean 128, cap 32/128/512/1536).
    """
    kind: str = "fixed"
    value: int = 64
    low: int = 1
    high: int = 64
    mean: float = 64.0
    cap: int = 256

    def __post_init__(self):
        if self.kind == "fixed":
            ok = self.value >= 1
        elif self.kind == "uniform":
            ok = 1 <= self.low <= self.high
        elif self.kind == "exponential":
            ok = self.mean > 0 and self.cap >= 1
        else:
            raise ValueError(f"length distribution must be fixed, uniform or exponential, got {self.kind!r}")
        if not ok:
            raise ValueError(f"bad {self.kind} length distribution: {self}")

    @classmethod
    def parse(cls, text: str) -> Lengths:
        """'64' or 'fixed:64', 'uniform:16:128', 'exp:128:512' (mean, cap)."""
        parts = str(text).strip().lower().split(":")
        try:
            if len(parts) == 1:
                return cls("fixed", value=int(parts[0]))
            kind, nums = parts[0], parts[1:]
            if kind == "fixed" and len(nums) == 1:
                return cls("fixed", value=int(nums[0]))
            if kind == "uniform" and len(nums) == 2:
                return cls("uniform", low=int(nums[0]), high=int(nums[1]))
            if kind in ("exp", "exponential") and len(nums) == 2:
                return cls("exponential", mean=float(nums[0]), cap=int(nums[1]))
        except ValueError:
            pass
        raise ValueError(f"cannot read length distribution {text!r}; use N, fixed:N, uniform:LO:HI or exp:MEAN:CAP")

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        return max(1, min(self.cap, round(rng.expovariate(1.0 / self.mean))))

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.value}"
        if self.kind == "uniform":
            return f"uniform:{self.low}:{self.high}"
        return f"exp:{self.mean:g}:{self.cap}"


# ---------------------------------------------------------------------------- specs

@dataclass(frozen=True)
class RequestClass:
    """`count` requests with their own prompt and output lengths and labels (see the module docstring)."""
    count: int
    prompt_lengths: Lengths
    output_lengths: Lengths
    cls: str | None = None
    tenant: str | None = None
    priority: int = 0

    def __post_init__(self):
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"a request class needs an integer count >= 1, got {self.count!r}")

    def to_dict(self) -> dict:
        return {**asdict(self), "prompt_lengths": self.prompt_lengths.describe(),
                "output_lengths": self.output_lengths.describe()}


@dataclass
class RequestSpec:
    """One request of a workload.

    arrival_s: seconds after the workload starts. Exactly one prompt source is set:
    `prompt` (a user message; chat template applied if the workload says so),
    `prompt_len` (synthetic, ids drawn at materialization, after the workload's first
    `prefix_len` shared ids) or `prompt_token_ids`. After `materialize()`,
    `prompt_token_ids` is always set. cls, tenant, priority: see RequestClass.
    """
    index: int
    arrival_s: float
    max_tokens: int
    prompt: str | None = None
    prompt_len: int | None = None
    prompt_token_ids: list[int] | None = None
    source: str = ""
    prefix_len: int = 0
    cls: str | None = None
    tenant: str | None = None
    priority: int = 0

    @property
    def num_prompt_tokens(self) -> int | None:
        if self.prompt_token_ids is not None:
            return len(self.prompt_token_ids)
        return None if self.prompt_len is None else self.prefix_len + self.prompt_len


@dataclass
class WorkloadSpec:
    """How to generate a workload.

    prompts: "real" (the bundled prompt set, shuffled, cycled when n exceeds it), "edit" (the editing set) or
    "synthetic" (lengths from `prompt_lengths`). rate: mean arrivals per second
    (Poisson); None or 0 means offline (everyone at t=0). burst: requests arriving
    together; bursts then come as a Poisson process at rate/burst, so the mean
    request rate stays `rate`. classes: a mix of RequestClasses (synthetic prompts;
    num_requests, prompt_lengths and output_lengths then come from the classes).
    shared_prefix_len: synthetic prompts start with this many ids shared by every request.
    """
    name: str = "custom"
    num_requests: int = 32
    prompts: str = "real"
    prompt_lengths: Lengths = field(default_factory=lambda: Lengths("fixed", value=512))
    output_lengths: Lengths = field(default_factory=lambda: Lengths("exponential", mean=64, cap=128))
    rate: float | None = None
    burst: int = 1
    seed: int = 0
    chat: bool = True
    ignore_eos: bool = True
    classes: tuple[RequestClass, ...] = ()
    shared_prefix_len: int = 0

    def __post_init__(self):
        if self.classes:
            self.num_requests = sum(c.count for c in self.classes)
        if (self.classes or self.shared_prefix_len) and self.prompts != "synthetic":
            raise ValueError("request classes and a shared prefix need synthetic prompts")
        if not isinstance(self.shared_prefix_len, int) or self.shared_prefix_len < 0:
            raise ValueError(f"shared_prefix_len must be an integer >= 0, got {self.shared_prefix_len!r}")
        if not isinstance(self.num_requests, int) or self.num_requests < 1:
            raise ValueError(f"num_requests must be an integer >= 1, got {self.num_requests!r}")
        if self.prompts not in (*PROMPT_SETS, "synthetic"):
            raise ValueError(f"prompts must be one of {', '.join(PROMPT_SETS)} or synthetic, got {self.prompts!r}")
        if self.rate is not None and not (self.rate >= 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be None or a finite number >= 0, got {self.rate!r}")
        if not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"burst must be an integer >= 1, got {self.burst!r}")

    @property
    def online(self) -> bool:
        return bool(self.rate)

    def request_classes(self) -> tuple[RequestClass, ...]:
        """The classes, or one unlabelled class of every request."""
        return self.classes or (RequestClass(self.num_requests, self.prompt_lengths, self.output_lengths),)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["prompt_lengths"] = self.prompt_lengths.describe()
        d["output_lengths"] = self.output_lengths.describe()
        d["classes"] = [c.to_dict() for c in self.classes]
        if self.classes:  # the classes' lengths apply, not these
            del d["prompt_lengths"], d["output_lengths"]
        return d


@dataclass
class Workload:
    name: str
    requests: list[RequestSpec]
    params: dict = field(default_factory=dict)  # the WorkloadSpec (or trace header) that made it
    chat: bool = True
    ignore_eos: bool = True

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def materialized(self) -> bool:
        return all(r.prompt_token_ids is not None for r in self.requests)

    @property
    def has_tenants(self) -> bool:
        return any(r.tenant is not None for r in self.requests)

    @property
    def duration_of_arrivals_s(self) -> float:
        return max((r.arrival_s for r in self.requests), default=0.0)

    def with_rate(self, rate: float | None, burst: int = 1, seed: int | None = None) -> Workload:
        """The same requests (prompts, lengths) with arrivals redrawn at `rate` (None: offline)."""
        seed = self.params.get("seed", 0) if seed is None else seed
        times = arrival_times(len(self.requests), rate, burst, _rng(seed, "arrivals"))
        reqs = [replace(r, arrival_s=t) for r, t in zip(self.requests, times)]
        return Workload(self.name, reqs, {**self.params, "rate": rate, "burst": burst},
                        self.chat, self.ignore_eos)

    def summary(self) -> dict:
        lens = [r.num_prompt_tokens for r in self.requests if r.num_prompt_tokens is not None]
        outs = [r.max_tokens for r in self.requests]
        return {
            "name": self.name, "num_requests": len(self.requests),
            "prompt_tokens_mean": sum(lens) / len(lens) if lens else None,
            "prompt_tokens_max": max(lens) if lens else None,
            "output_tokens_total": sum(outs), "output_tokens_mean": sum(outs) / len(outs),
            "output_tokens_max": max(outs), "last_arrival_s": self.duration_of_arrivals_s,
            **{k: v for k, v in self.params.items() if k not in ("name", "num_requests")},
        }


# ---------------------------------------------------------------------------- generation

def _rng(seed: int, stream: str) -> random.Random:
    # str seeds are hashed deterministically (sha512), independent of PYTHONHASHSEED.
    return random.Random(f"inflight-bench:{seed}:{stream}")


def arrival_times(n: int, rate: float | None, burst: int, rng: random.Random) -> list[float]:
    """n arrival offsets (seconds, non-decreasing): all 0 when offline, else bursts of
    `burst` requests whose start times form a Poisson process of rate `rate / burst`."""
    if not rate:
        return [0.0] * n
    times, t = [], 0.0
    while len(times) < n:
        times.extend([t] * min(burst, n - len(times)))
        t += rng.expovariate(rate / burst)
    return times


def make_workload(spec: WorkloadSpec) -> Workload:
    n = spec.num_requests
    out_rng = _rng(spec.seed, "outputs")
    kinds = [c for c in spec.request_classes() for _ in range(c.count)]  # each request's class
    max_tokens = [c.output_lengths.sample(out_rng) for c in kinds]
    times = arrival_times(n, spec.rate, spec.burst, _rng(spec.seed, "arrivals"))
    reqs = []
    if spec.prompts in PROMPT_SETS:
        pool = load_prompts(PROMPT_SETS[spec.prompts])
        order: list[dict] = []
        p_rng = _rng(spec.seed, "prompts")
        while len(order) < n:
            batch = list(pool)
            p_rng.shuffle(batch)
            order.extend(batch)
        for i in range(n):
            reqs.append(RequestSpec(i, times[i], max_tokens[i], prompt=order[i]["prompt"], source=order[i]["id"]))
    else:
        len_rng = _rng(spec.seed, "prompt-lengths")
        for i, c in enumerate(kinds):
            reqs.append(RequestSpec(i, times[i], max_tokens[i], prompt_len=c.prompt_lengths.sample(len_rng),
                                    source="synthetic", prefix_len=spec.shared_prefix_len, cls=c.cls,
                                    tenant=c.tenant, priority=c.priority))
    return Workload(spec.name, reqs, spec.to_dict(), spec.chat, spec.ignore_eos)


# ---------------------------------------------------------------------------- presets

def _quick(scale: float) -> WorkloadSpec:
    # 32 everyday chat prompts, all at t=0, output lengths exponential (mean 64, cap 128):
    # the Anyscale shape shrunk to fit a minute per strategy on 2 CPU cores.
    return WorkloadSpec("quick", num_requests=max(1, round(32 * scale)), prompts="real",
                        output_lengths=Lengths("exponential", mean=64, cap=128))


def _edit(scale: float) -> WorkloadSpec:
    # 8 requests to copy or edit a passage given in the prompt (assets/edit_prompts.jsonl), where
    # drafting from the prompt pays; each stops at its own end (the same greedy tokens in every lane).
    return WorkloadSpec("edit", num_requests=max(1, round(8 * scale)), prompts="edit",
                        output_lengths=Lengths("fixed", value=160), ignore_eos=False)


def _anyscale(scale: float) -> WorkloadSpec:
    # The study: 1000 prompts of 512 tokens, outputs exponential mean 128 (cap 32/128/512/1536;
    # 512 here, change it with --output-len exp:128:CAP), EOS ignored, all at t=0.
    return WorkloadSpec("anyscale", num_requests=max(1, round(1000 * scale)), prompts="synthetic",
                        prompt_lengths=Lengths("fixed", value=512),
                        output_lengths=Lengths("exponential", mean=128, cap=512), chat=False)


def _nano_vllm(scale: float) -> WorkloadSpec:
    # nano-vllm's bench.py: 256 requests, prompt and output lengths uniform in 100-1024, EOS ignored,
    # all at t=0 (its README: Qwen3-0.6B, 1434 tok/s on a laptop RTX 4070).
    return WorkloadSpec("nano-vllm", num_requests=_count(256, scale), prompts="synthetic",
                        prompt_lengths=Lengths("uniform", low=100, high=1024),
                        output_lengths=Lengths("uniform", low=100, high=1024), chat=False)


def _online(scale: float) -> WorkloadSpec:
    # quick's requests arriving as a Poisson process at 2 requests/s.
    return replace(_quick(scale), name="online", rate=2.0)


def _bursty(scale: float) -> WorkloadSpec:
    # quick's requests arriving in bursts of 8 (mean 2 requests/s).
    return replace(_quick(scale), name="bursty", rate=2.0, burst=8)


def _tiny(scale: float) -> WorkloadSpec:
    # For tests and smoke runs on tiny models: short synthetic prompts and outputs.
    return WorkloadSpec("tiny", num_requests=max(1, round(8 * scale)), prompts="synthetic",
                        prompt_lengths=Lengths("uniform", low=4, high=24),
                        output_lengths=Lengths("uniform", low=1, high=12), chat=False)


def _count(n: int, scale: float) -> int:
    return max(1, round(n * scale))


def _shared_prefix(scale: float) -> WorkloadSpec:
    # A 512-token system prompt shared by 64 requests with short unique suffixes and short
    # outputs, all at t=0: what prefix caching computes once instead of 64 times.
    return WorkloadSpec("shared-prefix", num_requests=_count(64, scale), prompts="synthetic",
                        prompt_lengths=Lengths("uniform", low=8, high=32), shared_prefix_len=512,
                        output_lengths=Lengths("uniform", low=8, high=16), chat=False)


def _hol(scale: float) -> WorkloadSpec:
    # Head-of-line blocking: 4 long requests (1024-token prompts, 256 output tokens) at the head
    # of the line, 28 short ones right behind them, all at t=0.
    return WorkloadSpec("hol", prompts="synthetic", chat=False, classes=(
        RequestClass(_count(4, scale), Lengths("fixed", value=1024), Lengths("fixed", value=256), cls="long"),
        RequestClass(_count(28, scale), Lengths("uniform", low=16, high=64), Lengths("uniform", low=8, high=32),
                     cls="short")))


def _flood(scale: float) -> WorkloadSpec:
    # Two tenants with the same kind of request, all at t=0: "flood" sends 64 and is ahead in
    # line, "few" sends 16 behind it. Both stay backlogged while "few" has work left.
    same = dict(prompt_lengths=Lengths("uniform", low=16, high=64), output_lengths=Lengths("uniform", low=16, high=48))
    return WorkloadSpec("flood", prompts="synthetic", chat=False, classes=(
        RequestClass(_count(64, scale), tenant="flood", **same),
        RequestClass(_count(16, scale), tenant="few", **same)))


def _interference(scale: float) -> WorkloadSpec:
    # Long prompts arriving while many requests decode (DistServe's and Splitwise's case for splitting
    # prefill from decode): chats with long answers, then 1024-token prompts with short answers among
    # them, classes alternating in arrival order at 3 requests/s.
    chat = dict(prompt_lengths=Lengths("uniform", low=16, high=64), output_lengths=Lengths("uniform", low=96, high=160),
                cls="decode")
    long = dict(prompt_lengths=Lengths("fixed", value=1024), output_lengths=Lengths("fixed", value=16), cls="long")
    return WorkloadSpec("interference", prompts="synthetic", chat=False, rate=3.0, classes=(
        RequestClass(_count(8, scale), **chat), RequestClass(_count(3, scale), **long),
        RequestClass(_count(4, scale), **chat), RequestClass(_count(3, scale), **long)))


PRESETS = {"quick": _quick, "edit": _edit, "anyscale": _anyscale, "nano-vllm": _nano_vllm, "online": _online, "bursty": _bursty,
           "tiny": _tiny, "shared-prefix": _shared_prefix, "hol": _hol, "flood": _flood,
           "interference": _interference}


def preset(name: str, scale: float = 1.0, **overrides) -> WorkloadSpec:
    """A named preset's WorkloadSpec; `scale` multiplies its request count, `overrides`
    replace fields (None values are ignored)."""
    if name not in PRESETS:
        raise ValueError(f"unknown workload preset {name!r}; choose one of {', '.join(PRESETS)}")
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    spec = PRESETS[name](scale)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    fixed = sorted(overrides.keys() & {"num_requests", "prompts", "prompt_lengths", "output_lengths"})
    if spec.classes and fixed:
        raise ValueError(f"preset {name!r} is a mix of request classes: {fixed[0]} cannot be overridden (use scale)")
    return replace(spec, **overrides) if overrides else spec


# ---------------------------------------------------------------------------- tokens

def materialize(workload: Workload, tokenizer, max_model_len: int | None = None) -> Workload:
    """Return a copy whose every request has `prompt_token_ids` for this tokenizer.

    Real prompts go through the chat template when the workload asks for it and the
    tokenizer has one (else plain encoding). Synthetic prompts draw ids uniformly from
    the tokenizer's non-special tokens with a per-request seeded stream, after the
    workload's shared prefix (drawn once, from its own stream).
    Raises ValueError when a request cannot fit `max_model_len`.
    """
    from ..detokenizer import apply_chat_template

    seed = workload.params.get("seed", 0)
    use_chat = workload.chat and bool(getattr(tokenizer, "chat_template", None))
    ordinary, shared = None, []
    reqs = []
    for r in workload.requests:
        ids = r.prompt_token_ids
        if ids is None and r.prompt is not None:
            if use_chat:
                ids = apply_chat_template(tokenizer, [{"role": "user", "content": r.prompt}])
            else:
                ids = tokenizer.encode(r.prompt, add_special_tokens=True)
        elif ids is None:
            if ordinary is None:
                special = set(tokenizer.all_special_ids)
                ordinary = [i for i in range(len(tokenizer)) if i not in special]
            if len(shared) < r.prefix_len:
                shared = _draw(ordinary, max(q.prefix_len for q in workload.requests), _rng(seed, "shared-prefix"))
            ids = shared[:r.prefix_len] + _draw(ordinary, r.prompt_len, _rng(seed, f"synthetic-prompt:{r.index}"))
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError(f"request {r.index}: empty prompt")
        if max_model_len is not None and len(ids) + r.max_tokens > max_model_len:
            raise ValueError(f"request {r.index}: prompt ({len(ids)} tokens) + max_tokens ({r.max_tokens}) "
                             f"exceeds the model's context of {max_model_len} tokens")
        reqs.append(replace(r, prompt_token_ids=ids))
    return Workload(workload.name, reqs, dict(workload.params), workload.chat, workload.ignore_eos)


def _draw(ids: list[int], n: int, rng: random.Random) -> list[int]:
    return [ids[rng.randrange(len(ids))] for _ in range(n)]


# ---------------------------------------------------------------------------- traces

LABELS = {"prefix_len": 0, "cls": None, "tenant": None, "priority": 0}  # request fields a trace keeps when set

def save_trace(workload: Workload, path: str | Path) -> None:
    """JSONL: a header line, then one line per request (token ids included once materialized)."""
    with open(path, "w", encoding="utf-8") as f:
        head = {"kind": TRACE_KIND, "version": TRACE_VERSION, "name": workload.name, "chat": workload.chat,
                "ignore_eos": workload.ignore_eos, "params": workload.params}
        f.write(json.dumps(head) + "\n")
        for r in workload.requests:
            row = {"index": r.index, "arrival_s": r.arrival_s, "max_tokens": r.max_tokens, "source": r.source}
            for key in ("prompt", "prompt_len", "prompt_token_ids"):
                if getattr(r, key) is not None:
                    row[key] = getattr(r, key)
            row.update((k, getattr(r, k)) for k, unset in LABELS.items() if getattr(r, k) != unset)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_trace(path: str | Path) -> Workload:
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or lines[0].get("kind") != TRACE_KIND:
        raise ValueError(f"{path}: not an Inflight workload trace (first line must have kind={TRACE_KIND!r})")
    head, reqs = lines[0], []
    if head.get("version") != TRACE_VERSION:
        raise ValueError(f"{path}: trace version {head.get('version')!r}, expected {TRACE_VERSION}")
    for i, row in enumerate(lines[1:]):
        sources = [k for k in ("prompt", "prompt_len", "prompt_token_ids") if row.get(k) is not None]
        if not sources:
            raise ValueError(f"{path}: request line {i + 1} has no prompt, prompt_len or prompt_token_ids")
        if not isinstance(row.get("max_tokens"), int) or row["max_tokens"] < 1:
            raise ValueError(f"{path}: request line {i + 1} needs an integer max_tokens >= 1")
        reqs.append(RequestSpec(index=row.get("index", i), arrival_s=float(row.get("arrival_s", 0.0)),
                                max_tokens=row["max_tokens"], prompt=row.get("prompt"),
                                prompt_len=row.get("prompt_len"), prompt_token_ids=row.get("prompt_token_ids"),
                                source=row.get("source", ""), **{k: row.get(k, v) for k, v in LABELS.items()}))
    if not reqs:
        raise ValueError(f"{path}: the trace holds no requests")
    reqs.sort(key=lambda r: (r.arrival_s, r.index))
    return Workload(head.get("name", Path(path).stem), reqs, head.get("params", {}),
                    head.get("chat", True), head.get("ignore_eos", True))
