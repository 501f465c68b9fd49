"""ModelRunner: one forward pass per iteration over a packed ragged batch, then sampling."""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..config import EngineConfig, attention_choice, resolve_cuda_graphs, resolve_torch_compile, weights_key
from ..device_memory import release_replaced_weights
from ..kv import KVCacheManager, KVPool
from ..kv.pool import blocks_for, kv_shape
from ..scheduler import ScheduledRow
from . import attention
from .attention import META_KWARG
from .files.loader import resolve_model_dir
from .decode_batch import DecodeBatch, DecodeTail, all_plain_decode
from .packed_batch import PackedBatch
from .fused_linears import fuse_siblings
from .packed_linear import pack_linears
from .device_tokens import LastTokens, SampledTokens
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

    def __init__(self, cfg: EngineConfig, progress=None, share: ModelRunner | None = None, field: str = "model",
                 overlap: bool = False):
        """share: a runner whose weights_key is the same; its weights are reused (read-only at
        inference, so engines in several threads can share them). field: the EngineConfig field that
        named this model (a draft model's is speculative_model), which a failure to load names. overlap:
        the engine launches a step before the one before it is read back (EngineConfig.overlap)."""
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
        self.torch_compile = resolve_torch_compile(cfg.torch_compile, self.device, self.cuda_graphs)
        self.hf_config = self.model.config
        self.kv_shape = kv_shape(self.hf_config)
        self.vocab_size = self.hf_config.vocab_size
        self.max_positions = self.hf_config.max_position_embeddings
        self.eos_token_ids = eos_token_ids(self.model.generation_config, self.tokenizer)
        self.pad_token_id = pad_token_id(self.tokenizer, self.eos_token_ids)
        self.pool: KVPool | None = None
        self.graphs: DecodeGraphs | None = None
        self.last_decode: DecodeTail | None = None  # the last step's batch, where it was decode-only (batch_for)
        # overlap: each request's last sampled token on the device, a launched step's input before it is read
        self.last_tokens = LastTokens(self.device) if overlap else None

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
        else:
            fuse_siblings(self.model)  # q/k/v and gate/up as one matmul each (fewer kernels a step)
        release_replaced_weights()  # the unpacked, unfused weights: else their memory stays held

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
        """off | on (replayed CUDA graphs) | eager buckets (no CUDA: the tests' path) | failed (why); then
        ", compiled in N s" where torch.compile built their forward, or ", compile failed (why)"."""
        if self.graphs is None:
            return "off"
        if self.graphs.failed:
            return f"failed ({self.graphs.failed})"
        state = "on" if self.graphs.capture else "eager buckets"
        if self.graphs.compile_failed:
            return f"{state}, compile failed ({self.graphs.compile_failed})"
        if not self.torch_compile:
            return state
        breaks = self.graphs.graph_breaks
        return f"{state}, compiled in {self.graphs.compile_s:.1f} s" + (f" ({breaks} graph breaks)" if breaks else "")

    def allocate_kv(self, num_blocks: int, block_size: int, max_rows: int, max_model_len: int) -> None:
        """The KV pool, and the decode graphs' persistent inputs for up to max_rows rows."""
        self.pool = KVPool(self.kv_shape, num_blocks, block_size, self.dtype, self.device)
        if self.cuda_graphs:
            from .decode_graphs import DecodeGraphs  # imports triton
            self.graphs = DecodeGraphs(self, max_rows, blocks_for(max_model_len, block_size),
                                       capture=self.device.type == "cuda", compiled=self.torch_compile)

    def release_kv(self) -> None:
        """Drop the KV pool and what holds on to it (the decode graphs, the last decode batch's inputs, the
        last tokens); the weights stay, for a runner that shares them. Nothing runs on this one after."""
        self.pool = self.graphs = self.last_decode = self.last_tokens = None

    @torch.inference_mode()
    def launch(self, rows: list[ScheduledRow], cache: KVCacheManager) -> SampledTokens:
        """Run one iteration without waiting for it (on a GPU): the sampled tokens of every row that samples
        (ScheduledRow.num_samples each, in row order), on their way back. With overlap, each is also kept on the
        device for the next step's input (LastTokens)."""
        with on_device(self.device):
            batch = batch_for(self, cache, rows)
            logits = self.forward(batch)
            if not batch.sample_rows:
                return SampledTokens([], [])
            if batch.has_drafts:  # verified on the host, row by row
                return SampledTokens(sampled_tokens(logits, batch.sample_rows), batch.sample_rows)
            tokens = sample_rows(logits, batch.sample_rows)
            if self.last_tokens is not None:
                self.last_tokens.keep(batch.sample_matrix_rows(), tokens)
            return SampledTokens(tokens, batch.sample_rows)

    def forward(self, batch: PackedBatch | DecodeBatch) -> torch.Tensor:
        """The logits [len(batch.sample_idx), vocab] of one packed batch; its tokens' K/V written to the pool."""
        if self.graphs is not None and self.graphs.fits(batch):
            return self.graphs.logits(batch)
        ids, positions, keep, meta = batch.upload()
        return self.model(input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=keep,
                          **{META_KWARG: meta}).logits[0]


def batch_for(runner: ModelRunner, cache: KVCacheManager, rows: list[ScheduledRow]) -> PackedBatch | DecodeBatch:
    """A step's batch: a DecodeBatch when every row is a plain decode row (going on from the runner's last one
    where it can), else one packed row by row."""
    if all_plain_decode(rows):
        batch = DecodeBatch(runner, cache, rows, runner.last_decode)
        runner.last_decode = batch.tail
        return batch
    runner.last_decode = None
    batch = PackedBatch(runner, cache)
    batch.add_rows(rows)
    return batch


def on_device(device: torch.device):
    """The context a step runs in: on CUDA, its device (streams, graphs and Triton launches on cuda:N too)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def sample_rows(logits: torch.Tensor, rows: list[ScheduledRow]) -> torch.Tensor:
    """Each logit row's token, on the logits' device, where no row has a draft (`rows`: each row's ScheduledRow)."""
    reqs = [r.request for r in rows]
    return sample(logits, [r.params for r in reqs], [r.generator for r in reqs])


def sampled_tokens(logits: torch.Tensor, rows: list[ScheduledRow]) -> list[int]:
    """Each logit row's token, read back to the host (on a GPU, where the step waits for it), where rows may
    have drafts. `rows` names the ScheduledRow of each logit row (a draft row's repeated); a draft row that
    samples with a temperature is verified by rejection sampling instead."""
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
