"""Model folders: what makes one complete, and our cache of converted models."""
from __future__ import annotations

import json
import os
from pathlib import Path

COMPLETE_MARKER = ".inflight-complete"

_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                    "merges.txt", "special_tokens_map.json", "added_tokens.json",
                    "chat_template.jinja", "chat_template.json"]


class NotAvailable(Exception):
    """One resolution step could not provide the model; str() is the short reason."""


def models_cache_root() -> Path:
    """Folder holding our converted models: ``$INFLIGHT_CACHE``, else
    ``$XDG_CACHE_HOME/inflight/models``, else ``~/.cache/inflight/models``."""
    env = os.environ.get("INFLIGHT_CACHE")
    if env:
        return Path(os.path.expanduser(env))
    return user_cache() / "models"


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/inflight``, else ``~/.cache/inflight``: what outlives a reboot (models, compiled kernels)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(os.path.expanduser(xdg)) if xdg else Path(os.path.expanduser("~")) / ".cache"
    return base / "inflight"


def converted_cache_dir(model: str) -> Path:
    """Where the converted copy of hub id ``model`` lives (it may not exist)."""
    return models_cache_root() / model.replace("/", "--")


def missing_weights(d: Path) -> bool:
    """True when ``d`` has no usable weights (or a sharded index names absent shards)."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = d / index_name
        if index.exists():
            try:
                shards = set(json.loads(index.read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, AttributeError):
                return True
            return not shards or any(not (d / s).is_file() for s in shards)
    return not (any(p.is_file() for p in d.glob("*.safetensors"))
                or any(p.is_file() for p in d.glob("pytorch_model*.bin")))


def missing_parts(d: Path, need_tokenizer: bool) -> list[str]:
    missing = []
    if not (d / "config.json").is_file():
        missing.append("config.json")
    if missing_weights(d):
        missing.append("weights (*.safetensors or pytorch_model*.bin)")
    if need_tokenizer and not any((d / f).is_file() for f in _TOKENIZER_FILES):
        missing.append("tokenizer files")
    return missing


def is_complete_converted(d: Path) -> bool:
    return (d / COMPLETE_MARKER).is_file() and not missing_parts(d, need_tokenizer=True)


def short_error(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or "no details"
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def truthy(v: str | None) -> bool:
    return v is not None and v.strip().upper() in {"1", "ON", "YES", "TRUE", "Y"}
