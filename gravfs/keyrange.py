"""Ranges of byte keys, as sorted stores (LMDB, SSTables, Parquet indexes) seek them."""

from __future__ import annotations

from typing import Optional


def prefix_end(prefix: bytes) -> Optional[bytes]:
    """The smallest key greater than every key that starts with ``prefix`` (None: none)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def outermost(paths: list[bytes]) -> list[bytes]:
    """Sorted, without duplicates and without a path that lies under another
    (``a/b`` under ``a``): the walks that together cover every path at or under them,
    each once."""
    keys = sorted(set(paths))
    return [k for i, k in enumerate(keys) if not any(k.startswith(o + b"/") for o in keys[:i])]
