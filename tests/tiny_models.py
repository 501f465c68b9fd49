"""Tiny random-weight models and a byte-level BPE tokenizer for tests.

Everything here is deterministic and builds offline in well under a second
per model: a small byte-level BPE tokenizer trained on a fixed English text,
and per-family configs with tiny dimensions and seeded random weights.

Public helpers:
    make_byte_tokenizer(save_dir) -> PreTrainedTokenizerFast
    make_tiny_model(family, save_dir, **overrides) -> Path
    make_draft_model(target_dir, save_dir, noise) -> Path
    reference_greedy(model_dir, prompts, max_tokens) -> list[list[int]]
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    GenerationConfig,
    PreTrainedTokenizerFast,
)

FAMILIES: tuple[str, ...] = ("llama", "qwen2", "qwen3", "mistral", "gpt2")

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
# Trainer assigns special tokens the first ids, in this order.
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)

NUM_MERGES = 48

# Weight init std. Much larger than the HF default (0.02): tiny random models
# with small weights emit one token over and over; with 0.5 greedy outputs are
# varied (few repeats) and the top-1/top-2 logit margins stay well above fp32
# noise, which makes token-equality tests meaningful.
INIT_RANGE = 0.5

# Fixed training text for the BPE merges (content is irrelevant, it only has
# to be stable so the vocab is the same on every run).
_TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. The dog was not amused, and the
fox ran into the forest where the trees were tall and the air was cool.
Once upon a time there was a small engine that served many requests at the
same time. It kept the keys and the values of every request in pages of
memory, and when a request was finished the pages were given back.
Hello, world! How are you today? I am fine, thank you. What is the time?
It is the best of times, it is the worst of times. In the beginning there
was the word, and the word was with the user, and the user was waiting for
the answer. The answer is forty two. The system is a helpful assistant.
"""

# ChatML, as used by SmolLM2 / Qwen (no default system prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _build_raw_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte symbols
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIAL_TOKENS) + len(alphabet) + NUM_MERGES,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(_TRAINING_TEXT.splitlines(), trainer=trainer)
    return tok


def make_byte_tokenizer(save_dir: str | os.PathLike | None = None) -> PreTrainedTokenizerFast:
    """Build the test tokenizer; save it into ``save_dir`` when given.

    Byte-level BPE: 3 special tokens (ids 0..2: ``<|endoftext|>``,
    ``<|im_start|>``, ``<|im_end|>``), the 256 byte tokens and a few dozen
    merges. eos is ``<|im_end|>``, pad is ``<|endoftext|>``, bos is
    ``<|im_start|>`` (as in SmolLM2; nothing is prepended when encoding),
    with a ChatML chat template.
    """
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_build_raw_tokenizer(),
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        bos_token=IM_START,
        clean_up_tokenization_spaces=False,
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    if save_dir is not None:
        tok.save_pretrained(str(save_dir))
    return tok


def _family_config(family: str, vocab_size: int, ids: dict[str, int]):
    """Tiny config for ``family`` (no overrides applied yet)."""
    common_decoder = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=INIT_RANGE,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
    )
    if family == "llama":
        from transformers import LlamaConfig

        # Tied embeddings, like SmolLM2.
        return LlamaConfig(**{**common_decoder, "tie_word_embeddings": True})
    if family == "qwen2":
        from transformers import Qwen2Config

        # Qwen2 always has q/k/v bias.
        return Qwen2Config(
            **{**common_decoder, "num_hidden_layers": 3},
            use_sliding_window=False,
            sliding_window=None,
        )
    if family == "qwen3":
        from transformers import Qwen3Config

        # head_dim (32) != hidden_size / num_attention_heads (16).
        return Qwen3Config(
            **common_decoder,
            head_dim=32,
            use_sliding_window=False,
            sliding_window=None,
        )
    if family == "mistral":
        from transformers import MistralConfig

        # 4 layers and a single KV head (MQA), so it differs from llama.
        return MistralConfig(
            **{**common_decoder, "num_hidden_layers": 4, "num_key_value_heads": 1},
            sliding_window=None,
        )
    if family == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=vocab_size,
            n_embd=64,
            n_layer=2,
            n_head=4,
            n_positions=512,
            n_inner=128,
            initializer_range=INIT_RANGE,
            bos_token_id=ids["bos"],
            eos_token_id=ids["eos"],
            pad_token_id=ids["pad"],
            tie_word_embeddings=True,
        )
    raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")


def make_tiny_model(family: str, save_dir: str | os.PathLike, **overrides) -> Path:
    """Build a tiny random-weight ``family`` model and save it to ``save_dir``.

    Saves config + safetensors weights + tokenizer + generation_config.
    ``overrides`` are set on the config (e.g. ``num_hidden_layers=4``).
    Weights are seeded with ``torch.manual_seed(0)``; the global RNG state
    is restored afterwards.
    """
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    tok = make_byte_tokenizer(save_dir)
    eos = tok.convert_tokens_to_ids(IM_END)
    pad = tok.convert_tokens_to_ids(ENDOFTEXT)
    ids = {"eos": eos, "pad": pad, "bos": tok.bos_token_id}
    config = _family_config(family, len(tok), ids)
    for key, value in overrides.items():
        setattr(config, key, value)

    rng_state = torch.get_rng_state()
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.set_rng_state(rng_state)
    model.eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids["bos"],
        eos_token_id=eos,
        pad_token_id=pad,
        do_sample=False,
    )
    model.save_pretrained(str(save_dir), safe_serialization=True)
    return save_dir


def make_draft_model(target_dir: str | os.PathLike, save_dir: str | os.PathLike, noise: float = 0.05) -> Path:
    """A draft model for speculative decoding: the target's weights plus seeded noise (``noise`` times
    each tensor's spread), saved with the target's tokenizer. At 0.05 the tiny models' greedy picks agree
    on about a third of the draft tokens: drafts are accepted in part and rejected in part."""
    save_dir = Path(save_dir)
    model = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * noise * p.std().clamp(min=1e-3))
    model.save_pretrained(str(save_dir), safe_serialization=True)
    make_byte_tokenizer(save_dir)
    return save_dir


_MODEL_CACHE: dict[str, torch.nn.Module] = {}


def _load_reference(model_dir: str | os.PathLike) -> torch.nn.Module:
    key = str(Path(model_dir).resolve())
    model = _MODEL_CACHE.get(key)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(key, dtype=torch.float32)
        model.eval()
        gc = model.generation_config
        # Generate exactly max_new_tokens: never stop at EOS.
        gc.eos_token_id = None
        gc.pad_token_id = model.config.pad_token_id
        gc.do_sample = False
        gc.temperature = None
        gc.top_p = None
        gc.top_k = None
        _MODEL_CACHE[key] = model
    return model


def reference_greedy(
    model_dir: str | os.PathLike,
    prompts: list[list[int]],
    max_tokens: list[int] | int,
) -> list[list[int]]:
    """Greedy continuations from HF ``generate``, one prompt at a time.

    Returns only the new tokens; exactly ``max_tokens[i]`` per prompt (EOS
    does not stop generation).
    """
    if isinstance(max_tokens, int):
        max_tokens = [max_tokens] * len(prompts)
    if len(max_tokens) != len(prompts):
        raise ValueError("max_tokens must be an int or match len(prompts)")
    return [_greedy_one(model_dir, prompt, n) if n > 0 else [] for prompt, n in zip(prompts, max_tokens)]


# (model dir, prompt) -> the longest greedy continuation made so far: a greedy continuation's first n tokens
# are the n-token continuation, so one generate() serves every test that asks for as many or fewer
_REFERENCE: dict[tuple[str, tuple[int, ...]], list[int]] = {}


def _greedy_one(model_dir, prompt, n: int) -> list[int]:
    key = (str(model_dir), tuple(prompt))
    known = _REFERENCE.get(key, [])
    if len(known) < n:
        input_ids = torch.tensor([list(prompt)], dtype=torch.long)
        with torch.no_grad():
            gen = _load_reference(model_dir).generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                                      do_sample=False, max_new_tokens=n)
        known = _REFERENCE[key] = gen[0, input_ids.shape[1]:].tolist()
    return known[:n]
