"""A scenario file's TOML, read within bounds: its size, and (before tomllib, which would recurse without
end or convert a number of thousands of digits) how deep its arrays nest and how long its numbers are,
each refused naming the line, the table it is in and its key."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

MAX_FILE_BYTES = 64 * 1024
MAX_NESTING = 8          # arrays and inline tables within one value
MAX_DIGITS = 40
_KEY = re.compile(r"[ \t]*([^=\[\s][^=\n]*?)[ \t]*=")  # at a line's start (match anchors at pos)
_TABLE = re.compile(r"[ \t]*\[\[?([^\]\n]*)\]")          # a [table] or [[array of tables]] header line


def read_toml(path: Path, error) -> dict:
    """The file's table; error(message) (an exception) for what is wrong, the message without the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise error(e.strerror or str(e)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"{len(raw)} bytes, at most {MAX_FILE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"not UTF-8 text ({e})") from None
    problem = _too_big(text)
    if problem:
        raise error(problem)
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError, RecursionError) as e:
        raise error(str(e) or "nested too deeply to read") from None


def _too_big(text: str) -> str | None:
    """'line N: [TABLE] KEY: ...' for the first value nested too deep or with too long a number (strings and
    comments skipped), else None."""
    quote, depth, digits, line, table = None, 0, 0, 1, ""
    key = m.group(1).strip() if (m := _KEY.match(text)) else "?"
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, digits = line + 1, 0
            if quote is None and depth == 0 and (m := _TABLE.match(text, i + 1)):
                table = f"[{m.group(1).strip()}] "
            elif quote is None and depth == 0 and (m := _KEY.match(text, i + 1)):
                key = m.group(1).strip()
        if quote is not None:
            if text.startswith(quote, i) and not (quote[0] == '"' and _escaped(text, i)):
                i, quote = i + len(quote), None
                continue
        elif c in "\"'":
            quote = c * 3 if text.startswith(c * 3, i) else c
            i += len(quote)
            continue
        elif c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c in "[{" and (depth or _in_value(text, i)):
            depth += 1
            if depth > MAX_NESTING:
                return f"line {line}: {table}{key}: nested more than {MAX_NESTING} levels deep"
        elif c in "]}" and depth:
            depth -= 1
        elif c.isdigit():
            digits += 1
            if digits > MAX_DIGITS:
                return f"line {line}: {table}{key}: a number of more than {MAX_DIGITS} digits"
        else:
            digits = 0
        i += 1
    return None


def _escaped(text: str, i: int) -> bool:
    backslashes = len(text[:i]) - len(text[:i].rstrip("\\"))
    return backslashes % 2 == 1


def _in_value(text: str, i: int) -> bool:
    """A bracket after a key's '=' on its line (not a [table] or [[array of tables]] header)."""
    return "=" in text[text.rfind("\n", 0, i) + 1:i]
