"""Token ids to text, one token at a time; chat templates; stop strings.

IncrementalDetokenizer turns a stream of generated token ids into text deltas.
Each push decodes only a short window of recent tokens:

    ids:   ... | prefix_offset ........ read_offset ........ end
                 '-- prefix_text --'
                 '---------------- new_text ----------------'

prefix_text is the text of tokens already emitted (kept as context so that
decoders that treat the start of a string specially, e.g. by stripping a
leading space, decode the window the same way they would decode the whole
sequence); the delta is whatever new_text adds after it. While new_text ends
with U+FFFD the last token(s) stop inside a multi-byte character, so the text
is held back until a later token completes it.
"""
from __future__ import annotations

from collections.abc import Mapping

from .byte_text import ByteLevelDetokenizer, TokenTable, cut_character, is_byte_level, token_bytes
from .untrusted import is_int

REPLACEMENT_CHAR = "\ufffd"
# Prompt tokens used as initial context for the first output tokens.
_PROMPT_CONTEXT_TOKENS = 5
# A valid UTF-8 character is at most 4 bytes, so a tail that still ends in
# U+FFFD after this many held tokens is treated as genuinely broken (or as a
# run of tokens that each end inside a character) and no longer waited on
# whole; this keeps each push O(1) even for pathological output.
_MAX_HELD_TOKENS = 8


class IncrementalDetokenizer:
    """Streams the text of one request's output tokens.

    push(token_id) returns the text that token completes ("" when it completes
    none yet, e.g. a byte of a multi-byte character, or a special token with
    skip_special_tokens). `text` is every delta so far; `finish()` flushes
    anything held back at the end of the request.
    """

    def __init__(self, tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer  # (also sets the decode function: see the property)
        self.skip_special_tokens = skip_special_tokens
        self._skip_ids = frozenset(getattr(tokenizer, "all_special_ids", None) or ()) \
            if skip_special_tokens else frozenset()
        context = [int(t) for t in list(prompt_token_ids)[-_PROMPT_CONTEXT_TOKENS:]]
        self._ids: list[int] = context          # context + output ids still relevant
        self._prefix_offset = 0
        self._read_offset = len(context)
        self._prefix_text: str | None = None    # decode(ids[prefix:read]), computed lazily
        self._text = ""
        self.num_tokens = 0                      # output tokens pushed

    @property
    def tokenizer(self):
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer) -> None:
        """The tokenizer its windows are decoded with (an engine's thread gives each request its own)."""
        self._tokenizer = tokenizer
        self._rust_decode = rust_decode(tokenizer)

    @property
    def text(self) -> str:
        """All output text emitted so far (the concatenation of the deltas)."""
        return self._text

    def push(self, token_id: int) -> str:
        """Add one output token; return the new text it completes (maybe "")."""
        token_id = int(token_id)
        self.num_tokens += 1
        if token_id in self._skip_ids:
            return ""  # decodes to nothing, so it need not enter the window
        self._ids.append(token_id)
        prefix_text = self._get_prefix_text()
        new_text = self._decode(self._ids[self._prefix_offset:])
        held = len(self._ids) - self._read_offset
        if new_text.endswith(REPLACEMENT_CHAR):
            if held > _MAX_HELD_TOKENS:
                return self._emit_longest_clean(prefix_text, new_text)
            return ""
        if len(new_text) <= len(prefix_text):
            if held > _MAX_HELD_TOKENS:
                # These tokens add no text (e.g. special tokens the tokenizer
                # skips without listing them); drop them so the window stays short.
                del self._ids[self._read_offset:]
            return ""
        return self._emit(new_text[len(prefix_text):], len(self._ids))

    def finish(self) -> str:
        """Flush held-back text (may end in U+FFFD if the output stopped mid-character)."""
        if len(self._ids) == self._read_offset:
            return ""
        prefix_text = self._get_prefix_text()
        new_text = self._decode(self._ids[self._prefix_offset:])
        if len(new_text) <= len(prefix_text):
            return ""
        return self._emit(new_text[len(prefix_text):], len(self._ids))

    # -- internals -----------------------------------------------------------

    def _decode(self, ids: list[int]) -> str:
        # Clean-up of tokenization spaces rewrites text across token
        # boundaries (" ." -> "."), which a window-by-window decode cannot
        # reproduce, so it is always off here.
        if self._rust_decode is not None:
            return self._rust_decode(ids, skip_special_tokens=self.skip_special_tokens)
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)

    def _get_prefix_text(self) -> str:
        if self._prefix_text is None:
            self._prefix_text = self._decode(self._ids[self._prefix_offset:self._read_offset])
        return self._prefix_text

    def _emit(self, delta: str, new_read_offset: int) -> str:
        # The emitted tokens become the next window's context.
        self._prefix_offset = self._read_offset
        self._read_offset = new_read_offset
        self._prefix_text = None
        # Ids before the new prefix are never decoded again.
        if self._prefix_offset > 64:
            del self._ids[:self._prefix_offset]
            self._read_offset -= self._prefix_offset
            self._prefix_offset = 0
        self._text += delta
        return delta

    def _emit_longest_clean(self, prefix_text: str, new_text: str) -> str:
        """Too many held tokens: emit up to the last token boundary that is safe.

        A cut is safe when its text is a prefix of the whole window's text
        (the tokens after it do not change it); a cut whose text does not end
        in U+FFFD is preferred. Whatever U+FFFD is emitted this way stands for
        bytes that the tokens after the cut did not complete.
        """
        end = len(self._ids)
        cuts = []
        for cut in range(end - 1, self._read_offset, -1):
            text = self._decode(self._ids[self._prefix_offset:cut])
            if len(text) > len(prefix_text) and new_text.startswith(text):
                if not text.endswith(REPLACEMENT_CHAR):
                    return self._emit(text[len(prefix_text):], cut)
                cuts.append((cut, text))
        if cuts:
            cut, text = cuts[0]
            return self._emit(text[len(prefix_text):], cut)
        return ""


def rust_decode(tokenizer):
    """The Rust tokenizer's own decode where transformers' adds nothing to it but the clean-up (which the
    detokenizer turns off): a third of the time per call, and a step calls it twice for every row. None
    for any other tokenizer (a slow one, a subclass with a decode of its own): its decode is used."""
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:  # another transformers: its own decode
        return None
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or getattr(type(tokenizer), "_decode", None) is not TokenizersBackend._decode:
        return None
    return backend.decode


def _byte_table(tokenizer, skip_special_tokens: bool = True) -> TokenTable | None:
    """A byte-level tokenizer's table of each id's bytes (engine/byte_text.py) where its decode is the Rust
    one; None for any other tokenizer."""
    if rust_decode(tokenizer) is None or not is_byte_level(tokenizer):
        return None
    return token_bytes(tokenizer, skip_special_tokens)


def prepare_detokenizer(tokenizer) -> None:
    """Build now what detokenizer_for reads (a byte-level tokenizer's table: 0.08 s for SmolLM2's 49,152
    tokens), so that an engine's first request does not wait for it."""
    _byte_table(tokenizer)


def detokenizer_for(tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool = True):
    """A request's detokenizer: a byte-level tokenizer's table, else the window decoder above."""
    table = _byte_table(tokenizer, skip_special_tokens)
    if table is not None:
        return ByteLevelDetokenizer(tokenizer, table, cut_character(table, list(prompt_token_ids)))
    return IncrementalDetokenizer(tokenizer, prompt_token_ids, skip_special_tokens)


def apply_chat_template(tokenizer, messages: list[dict], add_generation_prompt=True, **kwargs) -> list[int]:
    """Render `messages` with the tokenizer's chat template; return the token ids.

    Extra kwargs go to the template (e.g. enable_thinking=False). Raises
    ValueError when the tokenizer has no chat template, the messages are not a
    non-empty list of {"role": str, "content": str}, or the template rejects them.
    """
    _validate_messages(messages)
    template = kwargs.get("chat_template") or getattr(tokenizer, "chat_template", None)
    if not template:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"tokenizer {name!r} has no chat template; send a plain prompt instead of messages")
    for key in ("tokenize", "return_tensors", "return_dict"):
        kwargs.pop(key, None)
    try:
        result = tokenizer.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=add_generation_prompt, **kwargs)
    except ValueError:
        raise
    except Exception as e:  # jinja2 errors, e.g. raise_exception("roles must alternate")
        raise ValueError(f"chat template failed on these messages: {e}") from e
    return _as_id_list(result)


def _validate_messages(messages) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f"messages must be a non-empty list of {{'role': str, 'content': str}}, got {messages!r}")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', got {m!r}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}]['role'] must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}]['content'] must be a string, got {content!r}")


def _as_id_list(result) -> list[int]:
    if isinstance(result, Mapping) or hasattr(result, "input_ids"):
        result = result["input_ids"]
    if hasattr(result, "tolist"):
        result = result.tolist()
    result = list(result)
    if len(result) == 1 and isinstance(result[0], (list, tuple)):
        result = list(result[0])  # a batch of one
    if not all(is_int(t) for t in result):
        raise ValueError(f"chat template did not produce token ids: {result!r:.200}")
    return [int(t) for t in result]


def find_stop(text: str, stops: list[str], start: int) -> int | None:
    """Index where the earliest stop string begins in `text`, or None.

    `start` is where the new text begins (the length of the text already
    checked); only stops that could end after it are looked for, i.e. the
    search starts at max(0, start - longest_stop + 1).
    """
    stops = [s for s in stops if s]
    if not stops:
        return None
    lo = max(0, start - max(len(s) for s in stops) + 1)
    best = None
    for s in stops:
        i = text.find(s, lo)
        if i != -1 and (best is None or i < best):
            best = i
    return best
