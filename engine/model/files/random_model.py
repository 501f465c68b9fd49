"""Random-weight model folders with real shapes, for speed figures where no weights can be downloaded.

A preset is a config in `assets/model_configs/` (SmolLM2-135M-Instruct, Qwen2.5-0.5B-Instruct,
Qwen3-0.6B). The folder built from it has that config, seeded random weights (bf16 safetensors,
transformers' own initialisation) and a byte-level tokenizer covering the model's whole vocabulary:
text encodes to one token per UTF-8 byte, ChatML special tokens sit at the config's EOS/BOS ids,
and every other id decodes as "<id>", so a random model's output reads as token ids. Good for
token-id prompts and for typing text into the app; its outputs mean nothing.

As a model name (loader.RANDOM_PREFIX): `random:Qwen2.5-0.5B-Instruct` (EngineConfig.model,
--model) builds the folder once into our model cache and reuses it. From the shell:

    python -m engine.model.files.random_model Qwen3-0.6B [--out DIR] [--set num_hidden_layers=4]
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch

from ...paths import ASSETS
from .model_files import COMPLETE_MARKER, is_complete_converted, models_cache_root

CONFIGS_DIR = ASSETS / "model_configs"
SPECIAL = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")  # eos, bos (when distinct), then a free id
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def presets() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))


def preset_config(name: str) -> dict:
    if name not in presets():
        raise ValueError(f"no model config {name!r} in assets/model_configs; presets: {', '.join(presets())}")
    return json.loads((CONFIGS_DIR / f"{name}.json").read_text())


def cached_random_model(name: str, progress: Callable[[str], None] | None = None) -> Path:
    """The folder of preset `name` in our model cache, built on first use (again if the preset changed)."""
    stamp = _stamp(name, preset_config(name), {}, 0)  # an unknown name fails before any work
    out = models_cache_root() / f"random--{name}"
    if not (is_complete_converted(out) and _read_stamp(out) == stamp):
        if progress:
            progress(f"building random-weight {name} into {out} (once)")
        build_random_model(name, out)
    return out


def build_random_model(name: str, out_dir: str | Path, overrides: dict | None = None, seed: int = 0,
                       dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write preset `name` (with config `overrides`) as a loadable folder with seeded random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    raw = {**preset_config(name), **(overrides or {})}
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", suffix=".partial", dir=out.parent))  # builders in
    # several processes (the benchmark's peers) each write their own, and the last rename wins
    ids = _special_ids(config)
    tokenizer = byte_tokenizer(config.vocab_size, ids)
    tokenizer.save_pretrained(str(tmp))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                                               pad_token_id=ids["<|endoftext|>"], do_sample=False)
    model.save_pretrained(str(tmp), safe_serialization=True)
    (tmp / COMPLETE_MARKER).write_text(_stamp(name, preset_config(name), overrides or {}, seed))
    shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another process renamed its copy first: same preset, same seed, same bytes
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _stamp(name: str, preset: dict, overrides: dict, seed: int) -> str:
    """What a folder was built from, kept in its completion marker."""
    return json.dumps({"random_weights": name, "preset": preset, "overrides": overrides, "seed": seed},
                      sort_keys=True)


def _read_stamp(folder: Path) -> str | None:
    try:
        return (folder / COMPLETE_MARKER).read_text()
    except OSError:
        return None


def _special_ids(config) -> dict[str, int]:
    """The ChatML specials' ids: <|im_end|> at the config's EOS, <|endoftext|> at its BOS when that
    differs, <|im_start|> (and <|endoftext|> otherwise) at the lowest free ids."""
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    taken = {"<|im_end|>": eos if eos is not None else 0}
    if config.bos_token_id is not None and config.bos_token_id != taken["<|im_end|>"]:
        taken["<|endoftext|>"] = config.bos_token_id
    free = (i for i in range(config.vocab_size) if i not in taken.values())
    for tok in SPECIAL:
        taken.setdefault(tok, next(free))
    return taken


def byte_tokenizer(vocab_size: int, special_ids: dict[str, int]):
    """A byte-level tokenizer of exactly `vocab_size` ids: the specials at their ids, the 256 byte
    symbols at the lowest free ids, every other id the token "<id>" (no merges, so text never
    encodes to those; they only decode)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < len(alphabet) + len(special_ids):
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level tokenizer")
    by_id = {i: tok for tok, i in special_ids.items()}
    free = [i for i in range(vocab_size) if i not in by_id]
    by_id.update(zip(free, alphabet))
    vocab = {by_id.get(i, f"<{i}>"): i for i in range(vocab_size)}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_ids])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", bos_token="<|endoftext|>",
                                  pad_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _parse_set(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes key=value, got {item!r}")
        out[key] = json.loads(value)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=presets())
    ap.add_argument("--out", default=None, help="folder to write (default: the model cache, as random:PRESET)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field (JSON value), e.g. num_hidden_layers=4; needs --out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    overrides = _parse_set(args.set)
    if args.out is None:
        if overrides:
            raise SystemExit("--set needs --out: the cached random:PRESET folder holds the preset as it is")
        print(cached_random_model(args.preset, progress=print))
    else:
        print(build_random_model(args.preset, args.out, overrides, seed=args.seed))


if __name__ == "__main__":
    main()
