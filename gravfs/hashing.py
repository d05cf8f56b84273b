"""Cryptographic hashing for every content-addressed ID.

SHA-256 (as lakeFS) so that IDs are collision-resistant: a forged collision
would let one branch poison another. Fast non-cryptographic hashes (xxhash) are
only used to pick range boundaries, never for identity.
"""

from __future__ import annotations

import hashlib

HASH_NAME = "sha256"
DIGEST_SIZE = 32
MIN_PREFIX = 6


def digest(data: bytes) -> bytes:
    """Raw 32-byte digest."""
    return hashlib.sha256(data).digest()


def hexdigest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hasher():
    """Incremental hasher for streaming content (data objects, ID chains)."""
    return hashlib.sha256()


def is_hex_id(text: str, min_len: int = MIN_PREFIX) -> bool:
    """True for a lowercase-hex string usable as an ID or a unique ID prefix."""
    if not (min_len <= len(text) <= 2 * DIGEST_SIZE):
        return False
    return all(c in "0123456789abcdef" for c in text)
