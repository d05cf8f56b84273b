"""Path <-> key rules shared by the CLI, the repository and the mount.

Keys are the UTF-8 path inside a branch with no leading '/'. A key ending in
'/' is a directory marker: it keeps an empty directory alive across commits.
"""

from __future__ import annotations

from gravfs.errors import BadNameError

MAX_NAME_BYTES = 255


def to_key(path: str | bytes, directory: bool = False) -> bytes:
    """Normalize a user path to a key; refuses '.', '..', NUL and over-long names."""
    raw = path.encode("utf-8", "surrogateescape") if isinstance(path, str) else bytes(path)
    parts = [p for p in raw.split(b"/") if p]
    for p in parts:
        if p in (b".", b".."):
            raise BadNameError(f"path {raw.decode('utf-8', 'replace')!r} contains {p.decode()!r}")
        if b"\x00" in p:
            raise BadNameError("path contains a NUL byte")
        if len(p) > MAX_NAME_BYTES:
            raise BadNameError(f"name longer than {MAX_NAME_BYTES} bytes: {p[:40].decode('utf-8', 'replace')}...")
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
    return key.decode("utf-8", "surrogateescape")
