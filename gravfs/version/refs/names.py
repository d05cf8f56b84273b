"""Branch and tag name rules: git's check-ref-format, narrowed for a filesystem.

A name is one path component (no '/'): every branch and tag is a directory
under ``branches/`` or ``tags/`` in the mount, where a slash would be
indistinguishable from a subdirectory. It is valid UTF-8 (S3 keys, JSON and the
staging database hold it as such) without Unicode control, format or separator
characters, so that it reads as it is in listings. A whole commit id is no name:
refs are looked up before ids (as git does for prefixes), so a ref named like a
commit's id would stand in for that commit.
"""

from __future__ import annotations

from gravfs import hashing
from gravfs.errors import BadNameError
from gravfs.quoting import char_safe

_FORBIDDEN = set(" ~^:?*[\\/") | {chr(c) for c in range(32)} | {"\x7f"}
MAX_NAME_BYTES = 255


def check_ref_name(name: str, what: str = "branch") -> str:
    """Return name if acceptable, else raise BadNameError saying why."""
    problem = _problem(name)
    if problem:
        raise BadNameError(f"invalid {what} name {name!r}: {problem}")
    return name


def _problem(name: str) -> str | None:
    if not name:
        return "empty"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    bad = sorted({c for c in name if c in _FORBIDDEN})
    if bad:
        return "contains " + ", ".join(repr(c) for c in bad)
    odd = sorted({c for c in name if not char_safe(c)})
    if odd:  # bidi overrides, line separators...: a name must read as it is
        return ("contains a control, format or separator character: "
                + ", ".join(f"U+{ord(c):04X}" for c in odd))
    if name.startswith("-"):
        return "starts with '-'"
    if name.startswith("."):
        return "starts with '.'"
    if name.endswith("."):
        return "ends with '.'"
    if name.endswith(".lock"):
        return "ends with '.lock'"
    if ".." in name:
        return "contains '..'"
    if "@{" in name:
        return "contains '@{'"
    if name == "@":
        return "is '@'"
    if name == "HEAD":  # git's word for the checked-out commit: a ref so named misleads
        return "is 'HEAD' (git's name for the current commit)"
    if "~" in name:
        return "contains '~'"
    if hashing.is_hex_id(name, min_len=2 * hashing.DIGEST_SIZE):
        return "is a whole commit id, which always names that commit"
    return None
