"""Path <-> key rules shared by the CLI, the repository and the mount.

Keys are the UTF-8 path inside a branch with no leading '/'. A key ending in
'/' is a directory marker: it keeps an empty directory alive across commits.

Keys gravfs writes always split into POSIX names. Another writer (lakeFS, a
Spark job, a hand-made range) can commit keys that do not: a leading '/', an
empty component ``a//b``, ``.`` or ``..`` components, a NUL byte, a name over
255 bytes, a trailing '/' on a file. Such *foreign* names are shown under an
escaped name (``escape_name``) that the mount and the CLI both accept back
(``unescape_name``). Splitting follows one grammar everywhere: a separator is
the first '/' of a run, and the rest of a run of slashes belongs to the next
name (``a//b`` is ``a`` holding ``/b``; ``/x`` at the root is the name ``/x``).

``show`` prints a key with its foreign names escaped, quoted the way git does
(gravfs.quoting.quote), so a file name can never forge a line of a command's output.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

from gravfs.errors import BadNameError
from gravfs.quoting import quote

MAX_NAME_BYTES = 255
HASH_MARK = b"%~"  # an over-long escaped name ends with %~ and 16 hex digits of its hash
_HASHED = re.compile(rb"^(.*)%~([0-9a-f]{16})$", re.S)
_HEX = b"0123456789ABCDEF"


def to_key(path: str | bytes, directory: bool = False) -> bytes:
    """Normalize a user path to a key; refuses '.', '..', NUL and over-long names."""
    raw = path.encode("utf-8", "surrogateescape") if isinstance(path, str) else bytes(path)
    parts = [p for p in raw.split(b"/") if p]
    for p in parts:
        if p in (b".", b".."):
            raise BadNameError(f"path {quote(raw)} contains {p.decode()!r}")
        if b"\x00" in p:
            raise BadNameError("path contains a NUL byte")
        if len(p) > MAX_NAME_BYTES:
            raise BadNameError(f"name longer than {MAX_NAME_BYTES} bytes: {quote(p[:40])}...")
    key = b"/".join(parts)
    if directory and key:
        key += b"/"
    return key


def dir_prefix(key: bytes) -> bytes:
    """Listing prefix of a directory key (b'' for the root)."""
    if not key:
        return b""
    return key if key.endswith(b"/") else key + b"/"


def parent_of(key: bytes) -> bytes:
    k = key.rstrip(b"/")
    i = k.rfind(b"/")
    return b"" if i < 0 else k[:i]


def display(key: bytes) -> str:
    """Raw text of a key (invalid UTF-8 as surrogates): for JSON and logs of keys."""
    return key.decode("utf-8", "surrogateescape")


# -- names gravfs did not write ---------------------------------------------------------


def split_last(key: bytes) -> tuple[bytes, bytes]:
    """(parent key, last name) by the splitting grammar; the name keeps leading slashes."""
    i = key.rfind(b"/")
    if i < 0:
        return b"", key
    s = i
    while s > 0 and key[s - 1] == 0x2F:
        s -= 1
    if s == 0:  # the key starts with slashes: one name
        return b"", key
    return key[:s], key[s + 1:]


def first_name(rest: bytes) -> tuple[bytes, bool]:
    """The first name of ``rest`` (a key below a directory) and whether more follows it."""
    lead = len(rest) - len(rest.lstrip(b"/"))
    i = rest.find(b"/", lead) if lead < len(rest) else -1
    return (rest, False) if i < 0 else (rest[:i], True)


# every listed name passes name_problem (twice or three times a readdir entry): one
# C-level match answers for the common name
_plain_name = re.compile(rb"(?!\.\.?\Z)[^/\x00]{1,%d}\Z" % MAX_NAME_BYTES, re.DOTALL).match


def name_problem(name: bytes) -> Optional[str]:
    """Why a listed name cannot be a POSIX file name as it is (None: it can).

    ``name`` is a name as listings cut it: it may start with '/' (an empty
    component) and, for a file stored at a key ending in '/', end with one.
    """
    if _plain_name(name) is not None:
        return None
    if not name:
        return "empty name"
    if name.startswith(b"/"):
        return "empty path component (leading or doubled '/')"
    if name.endswith(b"/"):
        return "trailing '/' on a file"
    if name in (b".", b".."):
        return f"{name.decode()!r} component"
    if b"\x00" in name:
        return "NUL byte"
    if len(name) > MAX_NAME_BYTES:
        return f"name longer than {MAX_NAME_BYTES} bytes"
    return None


def key_problem(key: bytes, directory: bool = False) -> Optional[str]:
    """Why a stored key is not one gravfs could have written (None: it could).

    ``directory``: the entry is a directory, so one trailing '/' is its marker.
    """
    if not key:
        return "empty key"
    body = key
    if key.endswith(b"/") and len(key) > 1 and key[-2] != 0x2F:
        if not directory:
            return "trailing '/' on a file"
        body = key[:-1]
    for name in split_names(body):
        why = name_problem(name)
        if why is not None:
            return why
    return None


def split_names(key: bytes) -> list[bytes]:
    """Every name of a key by the splitting grammar (no trailing-'/' handling)."""
    out = []
    while True:
        name, more = first_name(key)
        out.append(name)
        if not more:
            return out
        key = key[len(name) + 1:]


def _pct(raw: bytes, dots: bool) -> bytes:
    out = bytearray()
    for b in raw:
        if b in (0x25, 0x2F, 0x00) or (dots and b == 0x2E):
            out += b"%%%02X" % b
        else:
            out.append(b)
    return bytes(out)


def escape_name(name: bytes) -> bytes:
    """The POSIX name a foreign name is shown under (a legal name is returned as is).

    '%', '/' and NUL become %25, %2F, %00; the names '.' and '..' become %2E and
    %2E%2E. A result over 255 bytes keeps a head of it and ends with ``%~`` and
    16 hex digits of SHA-256 of the name. Reversible by ``unescape_name``,
    except hashed names, which ``hashed_head`` turns into a place to search.
    """
    if name_problem(name) is None:
        return name
    dots = name in (b".", b"..")
    out = _pct(name, dots)
    if len(out) <= MAX_NAME_BYTES:
        return out
    tail = HASH_MARK + hashlib.sha256(name).hexdigest()[:16].encode()
    budget = MAX_NAME_BYTES - len(tail)
    head, size = 0, 0
    for b in name:
        step = 3 if b in (0x25, 0x2F, 0x00) else 1
        if size + step > budget:
            break
        size += step
        head += 1
    for _ in range(3):  # do not cut a UTF-8 character in two
        if 0 < head < len(name) and 0x80 <= name[head] < 0xC0:
            head -= 1
    return _pct(name[:head], False) + tail


def _unpct(text: bytes) -> Optional[bytes]:
    """Strict percent-decoding (two upper-case hex digits after each '%'), else None."""
    out = bytearray()
    i = 0
    while i < len(text):
        b = text[i]
        if b != 0x25:
            out.append(b)
            i += 1
            continue
        hi, lo = text[i + 1:i + 2], text[i + 2:i + 3]
        if not hi or not lo or hi not in _HEX or lo not in _HEX:
            return None
        out.append(int(text[i + 1:i + 3], 16))
        i += 3
    return bytes(out)


def unescape_name(name: bytes) -> Optional[bytes]:
    """The foreign name an escaped name stands for; None for any other name.

    Only the exact output of ``escape_name`` for a foreign name decodes, so an
    ordinary name containing '%' is never read as another one.
    """
    if b"%" not in name or HASH_MARK in name:
        return None
    raw = _unpct(name)
    if raw is None or name_problem(raw) is None or escape_name(raw) != name:
        return None
    return raw


def hashed_head(name: bytes) -> Optional[bytes]:
    """For an over-long escaped name: the raw bytes its foreign name starts with."""
    m = _HASHED.match(name)
    if m is None:
        return None
    return _unpct(m.group(1))


def escape_key(key: bytes, directory: bool = True) -> bytes:
    """A whole key as a path of shown names (foreign names escaped). A trailing '/'
    is kept as a directory marker; with ``directory`` false the key is a file's,
    and a file at ``name/`` is shown as ``name%2F``, as listings show it."""
    suffix = b""
    if key.endswith(b"/") and len(key) > 1 and key[-2] != 0x2F:
        if not directory:
            parent, name = split_last(key[:-1])
            shown = escape_name(name + b"/")
            return escape_key(parent) + b"/" + shown if parent else shown
        key, suffix = key[:-1], b"/"
    if not key:
        return suffix
    return b"/".join(escape_name(n) for n in split_names(key)) + suffix


# -- printing ---------------------------------------------------------------------------


def show(key: bytes, directory: bool = True) -> str:
    """A key as commands print it: foreign names escaped, then quoted."""
    return quote(escape_key(key, directory))
