"""Untrusted input, checked once where it enters: JSON frames and bodies, text fields, numbers.

What a client, an upload or a file chooses passes through here before any work is done on it. After
that, text is valid Unicode of bounded length (it can always be encoded) and numbers are finite and in
range. Every refusal is a ValueError whose message starts with the field it is about.
"""
from __future__ import annotations

import json
import math
import re
import reprlib

MAX_JSON_DEPTH = 32        # nesting of arrays and objects; our deepest command needs 4
MAX_NUMBER_CHARS = 40      # a JSON number literal longer than this is refused before it is converted
MAX_PATH_SHOWN = 6         # keys of a refused value's path that an error message shows
INT64 = (-(2**63), 2**63 - 1)
_SURROGATES = re.compile("[\ud800-\udfff]")  # what UTF-8 cannot encode (lone halves from JSON escapes)
_QUOTE = reprlib.Repr()
_QUOTE.maxlevel, _QUOTE.maxstring, _QUOTE.maxother, _QUOTE.maxlong = 3, 60, 60, 40


# ---- JSON ----------------------------------------------------------------------------------------
class JsonError(ValueError):
    """Why a JSON input was refused; `path` holds the keys down to the offending value (may be empty)."""

    def __init__(self, message: str, path: tuple = ()):
        super().__init__(message)
        self.path = path


def parse_json(raw: str | bytes, what: str = "the body"):
    """Standard JSON only (no NaN or Infinity), numbers of bounded length, nesting at most
    MAX_JSON_DEPTH deep. JsonError saying what is wrong and where ("params.seed: ...")."""
    try:
        try:
            value = json.loads(raw, parse_constant=_refuse, parse_float=_float, parse_int=_int)
        except _Refused:  # parse again, marking what was refused, to say where it is
            value = json.loads(raw, parse_constant=_Bad, parse_float=_lenient_float, parse_int=_lenient_int)
            path, bad = _find_bad(value)
            raise _error(what, path, bad.reason) from None
    except RecursionError:
        path = _deep_path(raw if isinstance(raw, str) else raw.decode("utf-8", "replace"), MAX_JSON_DEPTH)
        raise _error(what, path, f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise JsonError(f"{what} is not valid JSON: {e}") from None
    check_depth(value, what)
    return value


def _error(what: str, path: tuple, problem: str) -> JsonError:
    where = ".".join(scrub(str(p)[:40]) for p in path[:MAX_PATH_SHOWN]) + ("..." if len(path) > MAX_PATH_SHOWN else "")
    return JsonError(f"{where}: {problem}" if where else f"{what}: {problem}", path)


class _Refused(ValueError):
    pass


class _Bad:
    """A literal the strict parse refused, kept (in the second parse) to be found and named."""

    def __init__(self, literal: str, reason: str | None = None):
        self.reason = reason or f"{literal} is not a JSON number"


def _refuse(literal: str):
    raise _Refused(literal)


def _float(literal: str) -> float:
    value = _lenient_float(literal)
    if isinstance(value, _Bad):
        raise _Refused(literal)
    return value


def _int(literal: str) -> int:
    value = _lenient_int(literal)
    if isinstance(value, _Bad):
        raise _Refused(literal)
    return value


def _lenient_float(literal: str):
    if len(literal) > MAX_NUMBER_CHARS:
        return _Bad(literal, f"a number of {len(literal)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(literal)
    return value if math.isfinite(value) else _Bad(literal, f"{literal} is out of range")


def _lenient_int(literal: str):
    if len(literal) > MAX_NUMBER_CHARS:
        return _Bad(literal, f"a number of {len(literal)} characters (at most {MAX_NUMBER_CHARS})")
    return int(literal)


def _find_bad(value) -> tuple[tuple, _Bad]:
    stack = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Bad):
            return path, node
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack.extend((v, (*path, k)) for k, v in items)
    return (), _Bad("", "a value is not allowed")


def check_depth(value, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """JsonError if lists and dicts nest deeper than limit (iterative: no recursion to exhaust)."""
    stack = [(value, ())]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
        if items is None:
            continue
        if len(path) >= limit:
            raise _error(what, path, f"nested more than {limit} levels deep")
        stack.extend((v, (*path, k)) for k, v in items if isinstance(v, (dict, list)))


def _deep_path(text: str, limit: int) -> tuple:
    """The keys down to where text nests deeper than limit (for JSON too deep to parse at all)."""
    keys, key, last, in_string, escaped, start = [], None, None, False, False, 0
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string, last = False, text[start:i][:40]
        elif c == '"':
            in_string, start = True, i + 1
        elif c == ":":
            key = last
        elif c in "[{":
            keys.append(key)
            key = None
            if len(keys) > limit:
                break
        elif c in "]}":
            keys = keys[:-1]
        elif c == ",":
            key = None
    return tuple(k for k in keys if k is not None)


# ---- text ----------------------------------------------------------------------------------------
def encodable(s: str) -> bool:
    """Whether UTF-8 can encode s (no lone surrogate)."""
    return _SURROGATES.search(s) is None


def scrub(s: str) -> str:
    """s with what cannot be encoded replaced by U+FFFD: for text we relay rather than refuse (a
    remote server's answer)."""
    return _SURROGATES.sub("\ufffd", s)


def is_text(x, max_chars: int) -> bool:
    """A non-blank string of at most max_chars characters that can be encoded."""
    return isinstance(x, str) and x.strip() != "" and len(x) <= max_chars and encodable(x)


def text(value, field: str, max_chars: int, *, empty: bool = False) -> str:
    """value if it is a string of at most max_chars characters that can be encoded (and, unless
    `empty`, not blank); else ValueError naming the field."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise ValueError(f"{field} must be at most {max_chars} characters, got {len(value)}")
    if not empty and not value.strip():
        raise ValueError(f"{field} must not be empty")
    bad = _SURROGATES.search(value)
    if bad is not None:
        raise ValueError(f"{field} is not valid Unicode text: a lone surrogate at character {bad.start()}")
    return value


# ---- numbers -------------------------------------------------------------------------------------
def is_int(x) -> bool:
    """An integer, and not a bool (JSON's true is not 1)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x) -> bool:
    """A finite int or float, and not a bool."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def integer(value, field: str, lo: int, hi: int) -> int:
    if not is_int(value) or not lo <= value <= hi:
        raise ValueError(f"{field} must be an integer from {lo} to {hi}, got {shown(value)}")
    return value


def number(value, field: str, lo: float, hi: float) -> float:
    if not is_number(value) or not lo <= value <= hi:
        raise ValueError(f"{field} must be a number from {lo:g} to {hi:g}, got {shown(value)}")
    return float(value)


def shown(value) -> str:
    """A value as an error message quotes it: its repr (which escapes what cannot be encoded), cut
    short and shallow, whatever its size or depth."""
    return _QUOTE.repr(value)


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#!|<>~$&:])")  # ':' stops links (http://) and Streamlit's :color[]


def markdown_text(value) -> str:
    """Text from outside (a recording's model name, a file name) for a markdown page: every markdown and
    HTML character escaped, so it shows as the characters it holds, never as a link, image or markup."""
    return _MARKDOWN.sub(r"\\\1", " ".join(str(value).split()))
