"""Hugging Face cache and Hub: a model folder for a hub id, failing fast when the hub is silent."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from .model_files import NotAvailable, missing_parts, short_error, truthy

DEFAULT_HUB_TIMEOUT_S = 3.0

_ALLOW_COMMON = ["config.json", "generation_config.json", "tokenizer*", "vocab.json", "merges.txt",
                 "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                 "chat_template.json"]
_ALLOW_SAFETENSORS = ["model*.safetensors", "model.safetensors.index.json"]
_ALLOW_BIN = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]


def hub_offline() -> bool:
    v = os.environ.get("HF_HUB_OFFLINE")
    if v is not None:
        return truthy(v)
    try:
        from huggingface_hub import constants
        return bool(constants.HF_HUB_OFFLINE)
    except Exception:
        return False


def _hub_timeout() -> float:
    try:
        t = float(os.environ.get("INFLIGHT_HUB_TIMEOUT", DEFAULT_HUB_TIMEOUT_S))
    except ValueError:
        t = DEFAULT_HUB_TIMEOUT_S
    return t if t > 0 else DEFAULT_HUB_TIMEOUT_S


def from_hf_cache(model: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download
        snap = Path(snapshot_download(model, local_files_only=True,
                                      allow_patterns=_ALLOW_COMMON + _ALLOW_SAFETENSORS + _ALLOW_BIN))
    except Exception:
        return None
    return snap if snap.is_dir() and not missing_parts(snap, need_tokenizer=True) else None


def from_hub(model: str, progress: Callable[[str], None]) -> Path:
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            OfflineModeIsEnabled,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as e:
        raise NotAvailable(f"huggingface_hub is not usable: {short_error(e)}") from None

    timeout = _hub_timeout()
    # snapshot_download's first request has no timeout and hangs on a silent network;
    # model_info takes one, so it doubles as a reachability probe.
    try:
        info = HfApi().model_info(model, timeout=timeout)
    except GatedRepoError:
        raise NotAvailable("the model is gated on the hub: accept its terms on huggingface.co "
                            "and log in with `hf auth login`") from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise NotAvailable("no such model on the hub (or it is private)") from None
    except OfflineModeIsEnabled:
        raise NotAvailable("hub not tried: HF_HUB_OFFLINE=1 is set") from None
    except Exception as e:
        raise NotAvailable(f"hub unreachable within {timeout:g} s: {short_error(e)}") from None

    names = [s.rfilename for s in (info.siblings or [])]
    has_st = any(re.fullmatch(r"model.*\.safetensors", n) for n in names)
    has_bin = any(re.fullmatch(r"pytorch_model.*\.bin", n) for n in names)
    if names and not (has_st or has_bin):
        raise NotAvailable("the hub repository has no model*.safetensors or pytorch_model*.bin "
                            "weights at its top level")
    allow = _ALLOW_COMMON + (_ALLOW_SAFETENSORS if has_st or not names else _ALLOW_BIN)

    progress(f"Downloading {model} from the Hugging Face Hub…")
    try:
        snap = Path(snapshot_download(model, allow_patterns=allow))
    except Exception as e:
        raise NotAvailable(f"hub download failed: {short_error(e)}") from None
    missing = missing_parts(snap, need_tokenizer=True)
    if missing:
        raise NotAvailable(f"the hub repository lacks {' and '.join(missing)}")
    return snap
