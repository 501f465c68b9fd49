"""Random-weight model folders with the shapes of assets/model_configs (engine/model/files/random_model.py)."""
from __future__ import annotations

import json

import pytest
from transformers import AutoConfig, AutoTokenizer

from engine.model.files import random_model
from engine.model.files.loader import resolve_model_dir
from engine_helpers import greedy, make_engine, mixed_prompts
from tiny_models import reference_greedy

# The preset's family and vocabulary, narrower and shallower so a test builds it in a second;
# a wide init so greedy margins stay far above float noise (as in tiny_models).
SMALL = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, initializer_range=0.5)
HEADS = {"SmolLM2-135M-Instruct": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16),
         "Qwen2.5-0.5B-Instruct": dict(num_attention_heads=4, num_key_value_heads=2),
         "Qwen3-0.6B": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32)}  # head_dim != 64/4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("random_models")
    return {name: random_model.build_random_model(name, root / name, {**SMALL, **HEADS[name]})
            for name in HEADS}


def test_presets_are_the_bundled_configs():
    assert sorted(HEADS) == random_model.presets()


@pytest.mark.parametrize("name", sorted(HEADS))
def test_folder_keeps_the_preset_family_vocabulary_and_special_ids(built, name):
    preset = random_model.preset_config(name)
    cfg = AutoConfig.from_pretrained(built[name])
    tok = AutoTokenizer.from_pretrained(built[name])
    assert cfg.model_type == preset["model_type"]
    assert cfg.vocab_size == preset["vocab_size"] == len(tok)
    assert tok.eos_token_id == preset["eos_token_id"]
    gen = json.loads((built[name] / "generation_config.json").read_text())
    assert gen["eos_token_id"] == preset["eos_token_id"]


@pytest.mark.parametrize("text", ["Héllo, wörld! 日本 🚀", " two  spaces\nand a line"])
def test_text_round_trips_and_every_id_decodes(built, text):
    tok = AutoTokenizer.from_pretrained(built["Qwen3-0.6B"])
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode()) and tok.decode(ids) == text  # one token per byte
    assert tok.decode([151935, 5000]) == "<151935><5000>"
    assert tok.encode("<5000>", add_special_tokens=False) != [5000]  # filler ids never come from text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("name", sorted(HEADS))
def test_engine_equals_generate_on_each_preset_family(built, name):
    prompts, max_tokens = mixed_prompts(6, vocab=40_000)
    eng = make_engine(built[name])
    outs = eng.generate(prompts, [greedy(n) for n in max_tokens])
    assert [o.output_token_ids for o in outs] == reference_greedy(built[name], prompts, max_tokens)


def test_same_seed_same_weights(tmp_path):
    kw = {**SMALL, **HEADS["SmolLM2-135M-Instruct"], "num_hidden_layers": 1}
    a = random_model.build_random_model("SmolLM2-135M-Instruct", tmp_path / "a", kw)
    b = random_model.build_random_model("SmolLM2-135M-Instruct", tmp_path / "b", kw)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_random_prefix_builds_once_into_the_cache(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    small = {**random_model.preset_config("Qwen3-0.6B"), **SMALL, **HEADS["Qwen3-0.6B"], "num_hidden_layers": 1}
    (configs / "Qwen3-0.6B.json").write_text(json.dumps(small))
    monkeypatch.setattr(random_model, "CONFIGS_DIR", configs)
    monkeypatch.setenv("INFLIGHT_CACHE", str(tmp_path / "cache"))
    said = []
    first = resolve_model_dir("random:Qwen3-0.6B", progress=said.append)
    assert first == tmp_path / "cache" / "random--Qwen3-0.6B" and len(said) == 1
    assert resolve_model_dir("random:Qwen3-0.6B", progress=said.append) == first and len(said) == 1
    (configs / "Qwen3-0.6B.json").write_text(json.dumps({**small, "rms_norm_eps": 1e-5}))  # the preset changed
    assert resolve_model_dir("random:Qwen3-0.6B", progress=said.append) == first and len(said) == 2
    assert AutoConfig.from_pretrained(first).rms_norm_eps == 1e-5
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no partial folder left behind


def test_unknown_preset_names_the_presets(tmp_path, monkeypatch):
    monkeypatch.setenv("INFLIGHT_CACHE", str(tmp_path))
    for name in ("Llama-70B", "../model_configs/Qwen3-0.6B"):
        with pytest.raises(ValueError, match="presets: .*Qwen3-0.6B"):
            resolve_model_dir(f"random:{name}")


def test_cli_refuses_overrides_into_the_shared_cache():
    with pytest.raises(SystemExit, match="--set needs --out"):
        random_model.main(["SmolLM2-135M-Instruct", "--set", "num_hidden_layers=2"])
