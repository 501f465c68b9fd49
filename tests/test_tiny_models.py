"""Sanity checks for the tiny test models and tokenizer (tests/tiny_models.py)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from tiny_models import FAMILIES, IM_END, IM_START, make_byte_tokenizer, reference_greedy

ROUND_TRIP_TEXTS = [
    "héllo 日本 🚀",
    "",
    " leading and trailing spaces  ",
    "line one\nline two\n\n\ttab",
    "Ünïcödé ñ ß ø 中文 한국어 العربية 👩‍👩‍👧 🇫🇷",
]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_tokenizer_round_trip(text):
    tok = make_byte_tokenizer()
    ids = tok.encode(text, add_special_tokens=False)
    assert all(0 <= i < len(tok) for i in ids)
    assert tok.decode(ids) == text


def test_tokenizer_is_deterministic_and_small():
    a, b = make_byte_tokenizer(), make_byte_tokenizer()
    assert a.get_vocab() == b.get_vocab()
    assert 256 + 3 < len(a) <= 512
    assert a.eos_token == IM_END and a.pad_token == "<|endoftext|>"
    assert a.bos_token == IM_START
    assert len({a.eos_token_id, a.pad_token_id, a.bos_token_id}) == 3
    # Special tokens are single ids; plain text never produces them.
    assert a.encode(IM_END, add_special_tokens=False) == [a.eos_token_id]
    assert a.eos_token_id not in a.encode("im_end |> <| hello", add_special_tokens=False)
    # Nothing is prepended or appended when encoding.
    assert a.encode("hi", add_special_tokens=True) == a.encode("hi", add_special_tokens=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_model_dir_contents(tiny_model_dirs, family):
    d = tiny_model_dirs[family]
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
        assert (d / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(d)
    cfg = AutoConfig.from_pretrained(d)
    assert cfg.model_type == family
    assert cfg.vocab_size == len(tok)
    assert cfg.eos_token_id == tok.eos_token_id
    assert cfg.pad_token_id == tok.pad_token_id
    assert cfg.bos_token_id == tok.bos_token_id
    gen = json.loads((d / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_token_id


def test_family_specific_configs(tiny_model_dirs):
    cfgs = {f: AutoConfig.from_pretrained(tiny_model_dirs[f]) for f in FAMILIES}
    for f in ("llama", "qwen2", "qwen3", "mistral"):
        c = cfgs[f]
        assert c.hidden_size == 64
        assert c.num_key_value_heads < c.num_attention_heads  # GQA / MQA
        assert c.max_position_embeddings == 512
    assert cfgs["qwen3"].head_dim == 32 != cfgs["qwen3"].hidden_size // cfgs["qwen3"].num_attention_heads
    assert cfgs["qwen2"].use_sliding_window is False
    assert cfgs["qwen3"].use_sliding_window is False
    assert cfgs["mistral"].sliding_window is None
    assert cfgs["gpt2"].n_positions == 512


def test_reload_offline(tiny_model_dirs, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    for family in FAMILIES:
        d = tiny_model_dirs[family]
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(d)
        assert tok.decode(tok.encode("héllo 日本 🚀")) == "héllo 日本 🚀"
        with torch.no_grad():
            logits = model(torch.tensor([tok.encode("hello")])).logits
        assert logits.shape[-1] == len(tok)
        assert torch.isfinite(logits).all()


def test_chat_template(tiny_llama_dir):
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "héllo 🚀"},
    ]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nhéllo 🚀<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert text == no_prompt + "<|im_start|>assistant\n"
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    assert ids == tok.encode(text, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids(IM_START)
    assert ids.count(tok.eos_token_id) == 2


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_greedy(tiny_model_dirs, family):
    d = tiny_model_dirs[family]
    tok = AutoTokenizer.from_pretrained(d)
    prompts = [tok.encode("Hello, world!"), tok.encode("x"), tok.encode("日本 🚀 The quick brown fox")]
    first = reference_greedy(d, prompts, [7, 1, 20])
    assert [len(x) for x in first] == [7, 1, 20]
    assert all(0 <= t < len(tok) for seq in first for t in seq)
    assert reference_greedy(d, prompts, [7, 1, 20]) == first
    # An int max_tokens applies to every prompt; a shorter run is a prefix.
    short = reference_greedy(d, prompts, 5)
    assert [len(x) for x in short] == [5, 5, 5]
    for s, f in zip(short, first):
        n = min(len(s), len(f))
        assert s[:n] == f[:n]
    # Outputs are not degenerate (random tiny models often repeat one token).
    assert len(set(first[2])) >= 5


def test_reference_greedy_ignores_eos(tiny_llama_dir, tmp_path):
    """Generation runs to max_tokens even when the greedy token is the EOS id."""
    prompt = AutoTokenizer.from_pretrained(tiny_llama_dir).encode("Hello")
    expected = reference_greedy(tiny_llama_dir, [prompt], 10)[0]
    # Copy of the model whose configured EOS is the first greedy token.
    d = tmp_path / "eos_model"
    shutil.copytree(tiny_llama_dir, d)
    for name in ("config.json", "generation_config.json"):
        cfg = json.loads((d / name).read_text())
        cfg["eos_token_id"] = expected[0]
        (d / name).write_text(json.dumps(cfg))
    assert reference_greedy(d, [prompt], 10)[0] == expected


def test_reference_greedy_matches_forward_argmax(tiny_model_dirs):
    """The reference is plain greedy decoding of the full-sequence forward pass."""
    for family in FAMILIES:
        d = tiny_model_dirs[family]
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        prompt = [5, 80, 123, 200, 17]
        out = reference_greedy(d, [prompt], 6)[0]
        seq = list(prompt)
        with torch.no_grad():
            for _ in range(6):
                seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        assert seq[len(prompt):] == out, family
