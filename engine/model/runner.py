"""ModelRunner: one forward pass per iteration over a packed ragged batch, then sampling."""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..config import EngineConfig, attention_choice, resolve_cuda_graphs, weights_key
from ..device_memory import trim_malloc
from ..kv import KVCacheManager, KVPool
from ..kv.pool import blocks_for, kv_shape
from ..request import Request
from ..scheduler import ScheduledRow
from . import attention
from .attention import META_KWARG, BatchMeta, PrefillSeq
from .files.loader import resolve_model_dir
from .packed_linear import pack_linears
from .sampler import sample
from .spec_sampling import NO_TOKEN, verify_draft
from .tokens import eos_token_ids, pad_token_id

if TYPE_CHECKING:
    from .decode_graphs import DecodeGraphs


log = logging.getLogger(__name__)

# transformers' loading patches global state (meta-device init): one load at a time per process.
_LOAD_LOCK = threading.Lock()


class ModelRunner:
    """Loads a Hugging Face causal LM with Inflight's paged attention and runs it."""

    def __init__(self, cfg: EngineConfig, progress=None, share: ModelRunner | None = None, field: str = "model"):
        """share: a runner whose weights_key is the same; its weights are reused (read-only at
        inference, so engines in several threads can share them). field: the EngineConfig field that
        named this model (a draft model's is speculative_model), which a failure to load names."""
        self.weights_key = weights_key(cfg)
        self.model_name, self.device, self.dtype, _, self.linear = self.weights_key
        if share is not None and share.weights_key == self.weights_key and \
                cfg.attention_backend in ("auto", share.backend):  # (auto may have fallen back to torch)
            # Weights are shared; the tokenizer is not (fast tokenizers dislike concurrent use).
            self.model_dir, self.model = share.model_dir, share.model
            self.backend, self.backend_why = share.backend, share.backend_why
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        else:
            self._load(cfg, progress, field)
        self.cuda_graphs = resolve_cuda_graphs(cfg.cuda_graphs, self.device, self.backend)
        self.hf_config = self.model.config
        self.kv_shape = kv_shape(self.hf_config)
        self.vocab_size = self.hf_config.vocab_size
        self.max_positions = self.hf_config.max_position_embeddings
        self.eos_token_ids = eos_token_ids(self.model.generation_config, self.tokenizer)
        self.pad_token_id = pad_token_id(self.tokenizer, self.eos_token_ids)
        self.pool: KVPool | None = None
        self.graphs: DecodeGraphs | None = None

    def _load(self, cfg: EngineConfig, progress, field: str) -> None:
        with _LOAD_LOCK:
            try:
                self._load_locked(cfg, progress)
            except (ValueError, OSError) as e:  # the field that named the model, first
                raise ValueError(f"EngineConfig.{field}: {e}") from e

    def _load_locked(self, cfg: EngineConfig, progress) -> None:
        self.model_dir = resolve_model_dir(cfg.model, progress)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.backend, self.backend_why = self._attention(cfg, AutoConfig.from_pretrained(self.model_dir))
        attn_impl = attention.register(self.backend)
        try:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=self.dtype,
                                                         attn_implementation=attn_impl)
        except (ValueError, OSError, KeyError) as e:
            raise ValueError(f"{cfg.model}: cannot be loaded as a causal language model with "
                             f"Inflight's attention ({e})") from e
        self.model = model.to(self.device).eval()
        if self.linear == "onednn":
            pack_linears(self.model)
            trim_malloc()  # the unpacked weights: else malloc keeps their pages

    def _attention(self, cfg: EngineConfig, hf_config) -> tuple[str, str]:
        """(backend, why): attention_choice's, or on auto the reference where the Triton kernels
        cannot serve this model on this device (a head size they do not take, a failed compile)."""
        backend, why = attention_choice(cfg.attention_backend, self.device)
        if cfg.attention_backend == "auto" and backend == "triton":
            shape = kv_shape(hf_config)
            try:
                from .triton_attention import cannot_run  # imports triton only where it can run
            except Exception as e:  # noqa: BLE001 - a Triton that does not import: the reference
                problem = f"Triton could not be imported ({type(e).__name__}: {str(e)[:200]})"
            else:
                problem = cannot_run(hf_config.num_attention_heads, shape.kv_heads, shape.head_dim, self.dtype,
                                     self.device)
            if problem:
                log.warning("%s: attention falls back to the PyTorch reference: %s", cfg.model, problem)
                return "torch", f"auto: the PyTorch reference, {problem}"
        return backend, why

    def graphs_state(self) -> str:
        """off | on (replayed CUDA graphs) | eager buckets (no CUDA: the tests' path) | failed (why)."""
        if self.graphs is None:
            return "off"
        if self.graphs.failed:
            return f"failed ({self.graphs.failed})"
        return "on" if self.graphs.capture else "eager buckets"

    def allocate_kv(self, num_blocks: int, block_size: int, max_rows: int, max_model_len: int) -> None:
        """The KV pool, and the decode graphs' persistent inputs for up to max_rows rows."""
        self.pool = KVPool(self.kv_shape, num_blocks, block_size, self.dtype, self.device)
        if self.cuda_graphs:
            from .decode_graphs import DecodeGraphs  # imports triton
            self.graphs = DecodeGraphs(self, max_rows, blocks_for(max_model_len, block_size),
                                       capture=self.device.type == "cuda")

    @torch.inference_mode()
    def execute(self, rows: list[ScheduledRow], cache: KVCacheManager) -> list[int]:
        """Run one iteration; returns the sampled tokens of every row that samples (ScheduledRow.num_samples
        each), in row order."""
        with on_device(self.device):
            batch = PackedBatch(self, cache)
            for row in rows:
                batch.add(row)
            logits = self.forward(batch)
            if not batch.sample_rows:
                return []
            return sampled_tokens(logits, batch.sample_rows)

    def forward(self, batch: PackedBatch) -> torch.Tensor:
        """The logits [len(batch.sample_idx), vocab] of one packed batch; its tokens' K/V written to the pool."""
        if self.graphs is not None and self.graphs.fits(batch):
            return self.graphs.logits(batch)
        ids, positions, keep, meta = batch.upload()
        return self.model(input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=keep,
                          **{META_KWARG: meta}).logits[0]


def on_device(device: torch.device):
    """The context a step runs in: on CUDA, its device (streams, graphs and Triton launches on cuda:N too)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def sampled_tokens(logits: torch.Tensor, rows: list[ScheduledRow]) -> list[int]:
    """Each logit row's token, read back to the host (on a GPU, where the step waits for it). `rows` names
    the ScheduledRow of each logit row (a draft row's repeated); a draft row that samples with a
    temperature is verified by rejection sampling instead."""
    verified = {i for i, r in enumerate(rows) if r.draft and not r.request.params.greedy}
    drawn = [i for i in range(len(rows)) if i not in verified]
    reqs = [rows[i].request for i in drawn]
    tokens = sample(logits[drawn] if verified else logits, [r.params for r in reqs],
                    [r.generator for r in reqs]).tolist()
    if not verified:
        return tokens
    out = [NO_TOKEN] * len(rows)
    for i, tok in zip(drawn, tokens):
        out[i] = tok
    for i in sorted(verified):  # a row's positions are consecutive: verified once, from its first
        row = rows[i]
        if i == 0 or rows[i - 1] is not row:
            out[i:i + row.num_samples] = verify_draft(logits[i:i + row.num_samples], row.draft, row.request.params,
                                                      row.request.generator)
    return out


class PackedBatch:
    """Accumulates one iteration's tokens and attention layout, row by row."""

    def __init__(self, runner: ModelRunner, cache: KVCacheManager):
        self.runner, self.cache = runner, cache
        self.ids: list[int] = []
        self.positions: list[int] = []
        self.write_tok: list[int] = []
        self.write_slots: list[int] = []
        self.dec_idx: list[int] = []
        self.dec_tables: list[list[int]] = []
        self.dec_ctx: list[int] = []
        self.prefills: list[tuple[int, int, int, list[int]]] = []
        self.sample_idx: list[int] = []
        self.sample_rows: list[ScheduledRow] = []

    def add(self, row: ScheduledRow) -> None:
        req, pad = row.request, self.runner.pad_token_id
        if row.num_pad and row.num_new == 0:
            # A finished row that still holds its slot: one pad token attending to its cache.
            ctx = req.num_computed_tokens
            self._decode_row(len(self.ids), req, ctx)
            self.ids.append(pad)
            self.positions.append(min(ctx, self.runner.max_positions - 1))
        elif row.num_pad:
            # Left padding: computed through every layer, attends to nothing, stored nowhere.
            self.ids.extend([pad] * row.num_pad)
            self.positions.extend([0] * row.num_pad)
        if row.num_new:
            self._real_tokens(row, req)

    def _real_tokens(self, row: ScheduledRow, req: Request) -> None:
        start = req.num_computed_tokens
        ids = token_slice(req, start, start + row.num_new - len(row.draft))
        if row.draft:  # a draft row samples at its last token and after each draft token
            ids = ids + row.draft
        self.add_tokens(req, ids, start, row.num_samples, row)

    def add_tokens(self, req: Request, ids: list[int], start: int, num_samples: int = 0,
                   sample_row: ScheduledRow | None = None) -> None:
        """Tokens `ids` of req at positions start.., their K/V written to its blocks; the logits of the
        last num_samples of them kept (sample_rows names `sample_row` for each)."""
        t, n = len(self.ids), len(ids)
        end = start + n
        self.ids.extend(ids)
        self.positions.extend(range(start, end))
        self.write_tok.extend(range(t, t + n))
        self.write_slots.extend(self.cache.slots(req.request_id, start, end))
        if n == 1:
            self._decode_row(t, req, end)
        else:
            blocks = self.cache.block_tables[req.request_id][:self.cache.blocks_for(end)]
            self.prefills.append((t, t + n, end, blocks))
        if num_samples:
            self.sample_idx.extend(range(t + n - num_samples, t + n))
            self.sample_rows.extend([sample_row] * num_samples)

    def _decode_row(self, t: int, req: Request, ctx: int) -> None:
        self.dec_idx.append(t)
        self.dec_tables.append(self.cache.block_tables[req.request_id][:self.cache.blocks_for(ctx)])
        self.dec_ctx.append(ctx)

    def upload(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, BatchMeta]:
        """(input ids [1, T], positions [1, T], sampling rows, BatchMeta) on the device, from one copy."""
        # Decode rows longest first, so rows of similar length are neighbours (see decode_groups).
        order = sorted(range(len(self.dec_ctx)), key=lambda i: -self.dec_ctx[i])
        tables = [self.dec_tables[i] for i in order]
        width = len(tables[0]) if tables else 0
        all_written = len(self.write_tok) == len(self.ids)
        up = HostInts()
        ids, pos, keep, slots = (up.add(v) for v in (self.ids, self.positions, self.sample_idx, self.write_slots))
        written = None if all_written else up.add(self.write_tok)
        dec_idx, dec_ctx = up.add([self.dec_idx[i] for i in order]), up.add([self.dec_ctx[i] for i in order])
        dec_blocks = up.add([b for t in tables for b in t + [0] * (width - len(t))])
        layout = up.add([x for s, e, ctx, _ in self.prefills for x in (s, e - s, ctx)])
        blocks = [up.add(b) for *_, b in self.prefills]
        dev = up.send(self.runner.device)
        meta = BatchMeta(
            pool=self.runner.pool, num_tokens=len(self.ids),
            write_idx=None if written is None else dev[written], write_slots=dev[slots],
            decode_idx=dev[dec_idx], decode_blocks=dev[dec_blocks].view(len(tables), width), decode_ctx=dev[dec_ctx],
            decode_groups=decode_groups([len(b) for b in tables]),
            prefills=[PrefillSeq(s, e, ctx, dev[b]) for (s, e, ctx, _), b in zip(self.prefills, blocks)],
            prefill_layout=dev[layout].view(len(self.prefills), 3))
        return dev[ids].view(1, -1), dev[pos].view(1, -1), dev[keep], meta


class HostInts:
    """Lists of ints bound for the device as one tensor: a step's index tensors cost one transfer, and
    on CUDA (pinned, non-blocking) no host sync; each list comes back as a view of the copy."""

    def __init__(self):
        self._flat: list[int] = []
        self._parts: list[slice] = []

    def add(self, values) -> int:
        start = len(self._flat)
        self._flat.extend(values)
        self._parts.append(slice(start, len(self._flat)))
        return len(self._parts) - 1

    def send(self, device: torch.device) -> list[torch.Tensor]:
        host = torch.tensor(self._flat, dtype=torch.long)
        if device.type == "cuda":
            host = host.pin_memory().to(device, non_blocking=True)
        return [host[p] for p in self._parts]


def decode_groups(widths: list[int]) -> list[tuple[int, int, int]]:
    """(first row, end row, width in blocks) of runs of decode rows, given each row's block count in
    descending order: a row starts a new run when it needs at most half its run's width, so the K/V
    gathered for a row is never more than twice its own (padding every row to the longest, one row of
    1,024 tokens among fifteen of 16 copies 13x the K/V the rows hold)."""
    groups, start = [], 0
    for i, w in enumerate(widths):
        if i > start and 2 * w <= widths[start]:
            groups.append((start, i, widths[start]))
            start = i
    if widths:
        groups.append((start, len(widths), widths[start]))
    return groups


def token_slice(req: Request, start: int, end: int) -> list[int]:
    """Tokens [start, end) of prompt + output without concatenating the whole sequence."""
    p = req.prompt_token_ids
    if end <= len(p):
        return p[start:end]
    o, lp = req.output_token_ids, len(p)
    if start >= lp:
        return o[start - lp:end - lp]
    return p[start:] + o[:end - lp]
