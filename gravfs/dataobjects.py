"""File contents as content-addressed objects: ``data/<aa>/<sha256>``.

Writing streams the bytes through SHA-256 (never holding a file in memory)
and uploads only content the store lacks, so identical files on any branch
share one object. Reads go through the local tier and are verified against
the name, so a corrupted cached copy is refetched rather than served.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import BinaryIO

from gravfs import hashing
from gravfs.errors import CorruptDataError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
PREFIX = "data/"


def address_of(digest_hex: str) -> str:
    return f"{PREFIX}{digest_hex[:2]}/{digest_hex}"


def digest_of(address: str) -> str:
    return address.rsplit("/", 1)[-1]


def hash_file(path: str) -> tuple[str, int]:
    """(hex digest, size) of a local file, streamed."""
    h = hashing.hasher()
    size = 0
    with open(path, "rb") as f:
        while True:
            buf = f.read(CHUNK)
            if not buf:
                break
            h.update(buf)
            size += len(buf)
    return h.hexdigest(), size


class DataObjects:
    def __init__(self, store, tier, tmp_dir: str):
        self.store, self.tier, self.tmp_dir = store, tier, tmp_dir

    def put_path(self, path: str) -> tuple[str, int]:
        """Store a local file's content; returns (address, size)."""
        digest, size = hash_file(path)
        address = address_of(digest)
        if self.store.size(address) is None:
            self.store.upload(address, path)
            log.debug("uploaded %s (%d bytes)", address, size)
        return address, size

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        address = address_of(hashing.hexdigest(data))
        if self.store.size(address) is None:
            self.store.put(address, data)
        return address, len(data)

    def put_stream(self, src: BinaryIO) -> tuple[str, int]:
        """Copy a stream to a scratch file while hashing, then store it."""
        fd, tmp = tempfile.mkstemp(dir=self.tmp_dir, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, CHUNK)
            return self.put_path(tmp)
        finally:
            os.unlink(tmp)

    def acquire(self, address: str):
        """Pinned tier handle of the object (fetched once, hash-verified)."""
        digest = digest_of(address)

        def verify(path: str) -> None:
            got, _ = hash_file(path)
            if got != digest:
                raise CorruptDataError(f"content hashes to {got[:16]}..., expected {digest[:16]}...",
                                       path=path)

        return self.tier.acquire(address, verify=verify)

    def read(self, address: str, offset: int = 0, length: int = -1) -> bytes:
        with self.acquire(address) as h:
            with open(h.path, "rb") as f:
                f.seek(offset)
                return f.read(length if length >= 0 else -1)

    def copy_to(self, address: str, out: BinaryIO) -> int:
        n = 0
        with self.acquire(address) as h:
            with open(h.path, "rb") as f:
                while True:
                    buf = f.read(CHUNK)
                    if not buf:
                        return n
                    out.write(buf)
                    n += len(buf)
