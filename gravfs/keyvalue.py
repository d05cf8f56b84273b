"""``KEY=VALUE`` arguments of the command line (commit metadata, Spark settings)."""

from __future__ import annotations

from typing import Iterable

from gravfs.errors import GravfsError


def parse_pairs(items: Iterable[str], flag: str, unique: bool = False) -> list[tuple[str, str]]:
    """``K=V`` strings, as given to ``flag``, as (key, value) pairs; a string without
    '=' or with an empty key is a GravfsError naming the flag (not a dict's ValueError).
    ``unique``: a key given twice is one too (where the last would win without a word)."""
    out: list[tuple[str, str]] = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise GravfsError(f"{flag} needs KEY=VALUE, got {item!r}")
        k = k.strip()
        if unique and any(k == seen for seen, _ in out):
            raise GravfsError(f"{flag} {k} given twice: give each key once")
        out.append((k, v))
    return out
