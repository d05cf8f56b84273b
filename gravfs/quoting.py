"""Printing keys and names the way git does with core.quotePath=false.

Shared by every layer that prints a key (the version layer's conflict messages,
the catalog's paths, the CLI): a name can never forge a line of output. Text
other users wrote (commit messages, authors) goes through ``printable``: a
terminal never receives its control sequences.
"""

from __future__ import annotations

import unicodedata

_C_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f",
              0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}
_UNSAFE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")


def char_safe(ch: str) -> bool:
    """Not a control, format or separator character (nor a lone surrogate)."""
    return unicodedata.category(ch) not in _UNSAFE_CATEGORIES


def quote(name: bytes) -> str:
    """A name or path as git prints it with core.quotePath=false.

    Printed as is unless it holds a control character, '"', '\\', invalid
    UTF-8, or a Unicode format/separator character (bidi overrides, U+2028...):
    then it is wrapped in double quotes with C escapes (\\n \\t \\" \\\\) and
    octal \\NNN for every other byte of those characters. Valid UTF-8 text is
    printed as is.
    """
    if not name:
        return ""
    text = name.decode("utf-8", "surrogateescape")
    if all(c not in '"\\' and char_safe(c) for c in text):
        return text
    out = ['"']
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        else:
            out.append(c if char_safe(c) else _escaped(c))
    out.append('"')
    return "".join(out)


def _escaped(c: str) -> str:
    """An unsafe character as a C escape, or octal escapes of its bytes."""
    raw = c.encode("utf-8", "surrogateescape")
    if len(raw) == 1 and raw[0] in _C_ESCAPES:
        return _C_ESCAPES[raw[0]]
    return "".join("\\%03o" % b for b in raw)


def printable(line: str) -> str:
    """One line of another user's text as a terminal may show it: control and format
    characters (an escape sequence, a carriage return, bidi overrides) but the tab as
    C or octal escapes, the way ``quote`` writes them; everything else as is."""
    if all(c == "\t" or char_safe(c) for c in line):
        return line
    return "".join(c if c == "\t" or char_safe(c) else _escaped(c) for c in line)
