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
