"""A byte-level tokenizer's output as text: one table lookup and one UTF-8 step a token.

A byte-level BPE decoder (GPT-2's; SmolLM2, Qwen, Llama 3) maps every token to bytes and decodes their
concatenation as UTF-8, replacing what is not valid. So a token's text is its bytes fed to an incremental
UTF-8 decoder, which holds back a character cut short until the bytes that finish it come. The bytes of
every id are worked out once per tokenizer (SmolLM2's 49,152 tokens: 0.08 s, 2.2 MiB); a push is then a
lookup and a C call, where decoding a window of ids through the tokenizer costs two calls and a window
copy a token (docs/benchmark.md: update + detokenize at 256 rows, with the command).
"""
from __future__ import annotations

import codecs
import threading
import weakref

# GPT-2's byte -> printable character table, as a ByteLevel decoder reads it backwards.
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
_OTHERS = [b for b in range(256) if b not in _PRINTABLE]
CHAR_BYTE = {**{chr(b): b for b in _PRINTABLE}, **{chr(256 + n): b for n, b in enumerate(_OTHERS)}}

_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {skip: [bytes per id]}
_LOCK = threading.Lock()


def is_byte_level(tokenizer) -> bool:
    """A Rust tokenizer whose decoder is ByteLevel alone (a Sequence or a SentencePiece decoder is not)."""
    backend = getattr(tokenizer, "_tokenizer", None)
    return backend is not None and type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"


class TokenTable(list):
    """Each id's bytes (a list of bytes), and `texts`: each id's text where its bytes are whole UTF-8 on their
    own (None where they start or end inside a character, or are not UTF-8), the text a push gives at once
    when the decoder holds nothing."""

    def __init__(self, table: list[bytes]):
        super().__init__(table)
        self.texts = [_whole_text(b) for b in table]


def _whole_text(b: bytes) -> str | None:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def token_bytes(tokenizer, skip_special_tokens: bool = True) -> TokenTable:
    """The bytes each id of a byte-level tokenizer decodes to: its token's characters read back through
    the byte table, or the token's own UTF-8 where a character is not in it (an added token's text); a
    special token's are empty when skipped. Built once per tokenizer and kept while it lives."""
    with _LOCK:
        tables = _TABLES.setdefault(tokenizer, {})
        if skip_special_tokens not in tables:
            tables[skip_special_tokens] = TokenTable(_build(tokenizer, skip_special_tokens))
        return tables[skip_special_tokens]


def _build(tokenizer, skip_special_tokens: bool) -> list[bytes]:
    backend, special = tokenizer._tokenizer, set()
    if skip_special_tokens:  # the Rust tokenizer's special tokens, and those transformers names
        special = {i for i, t in backend.get_added_tokens_decoder().items() if t.special}
        special.update(getattr(tokenizer, "all_special_ids", None) or ())
    table = []
    for i in range(backend.get_vocab_size(with_added_tokens=True)):
        token = backend.id_to_token(i)
        if token is None or i in special:
            table.append(b"")
        elif all(c in CHAR_BYTE for c in token):
            table.append(bytes(CHAR_BYTE[c] for c in token))
        else:
            table.append(token.encode())
    return table


def cut_character(table: list[bytes], ids: list[int]) -> bytes:
    """The bytes of the character cut short that the bytes of ids (token_bytes' table) end in, if they do (a
    prompt given as ids may), else b""."""
    tail = b""
    for i in reversed(ids):  # back to 4 bytes (a character's most), past tokens of none (skipped specials)
        tail = (table[i] if 0 <= i < len(table) else b"") + tail
        if len(tail) >= 4:
            break
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(tail)
    held = decoder.getstate()[0]
    # (Python's decoder also holds ED A0..BF, a surrogate's start, which every decoder breaks as two characters)
    return held if len(held.decode("utf-8", "replace")) == 1 else b""


class ByteLevelDetokenizer:
    """Streams the text of one request's output tokens for a byte-level tokenizer (is_byte_level): the
    same interface and the same text as IncrementalDetokenizer. Its deltas match too, except that bytes
    which cannot start or continue a character become U+FFFD as soon as they come, not after up to eight
    held tokens. A prompt that ends inside a character (cut_character) is the window decoder's case too:
    the character its first bytes start is the prompt's text, so the first the output's bytes finish (or
    break: U+FFFD) is not the output's. (The window decoder looks back five prompt ids: where those are
    skipped specials or ids past the vocabulary after the cut, it misses the cut; this does not.)"""

    def __init__(self, tokenizer, table: TokenTable, cut: bytes = b""):
        """table: token_bytes(tokenizer, skip_special_tokens); cut: cut_character of the prompt."""
        self.tokenizer = tokenizer  # (an engine sets its thread's own: the table, shared, stays)
        self._bytes, self._texts = table, table.texts
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._utf8.decode(cut)
        self._held = self._prompts = bool(cut)  # the decoder holds the start of a character (the prompt's)
        self._pieces: list[str] = []  # the text, a piece a token (joined when read)
        self.num_tokens = 0

    @property
    def text(self) -> str:
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def push(self, token_id: int) -> str:
        self.num_tokens += 1
        if not 0 <= token_id < len(self._bytes):
            return ""  # an id past the tokenizer's vocabulary (a padded LM head): no text, as its decode gives
        delta = None if self._held else self._texts[token_id]
        if delta is None:  # a character cut short, on either side of this token: through the decoder
            delta = self._outputs(self._utf8.decode(self._bytes[token_id]))
            self._held = bool(self._utf8.getstate()[0])
        self._pieces.append(delta)
        return delta

    def finish(self) -> str:
        delta = self._outputs(self._utf8.decode(b"", final=True))
        self._held = False
        self._pieces.append(delta)
        return delta

    def _outputs(self, text: str) -> str:
        """The decoder's text less its first character where that is the prompt's (cut by the prompt's end)."""
        if self._prompts and text:
            self._prompts, text = False, text[1:]
        return text
