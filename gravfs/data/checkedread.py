"""Uploading a file another process may write, under an address named in an earlier pass.

An object's address is the SHA-256 of its bytes, read before the upload (the store is
asked first whether it has them). An upload that reads the file again would publish
whatever a writer left there meanwhile under the first read's address: a damaged object
that every later file of those bytes would take by deduplication. ``CheckedReader``
hashes what it hands to the upload and raises before it hands over the last bytes
unless they all hash to the address, so the upload (a PUT from memory, or a multipart
upload, which the transfer aborts) fails before anything is published.
"""

from __future__ import annotations

import os

from gravfs import hashing
from gravfs.errors import GravfsError


class ChangedWhileRead(GravfsError):
    """The file's bytes changed between the pass that named them and the upload."""


class CheckedReader:
    """A file-like reader of a file's first ``size`` bytes, once, in order; it has no
    seek, so an upload takes it as a stream."""

    def __init__(self, fd: int, size: int, digest: str, name: str = ""):
        self._fd, self._size, self._digest, self._name = fd, size, digest, name
        self._h = hashing.hasher()
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        left = self._size - self._pos
        want = left if n is None or n < 0 else min(n, left)
        if want <= 0:
            return b""
        parts, got = [], 0
        while got < want:
            buf = os.pread(self._fd, want - got, self._pos + got)
            if not buf:
                raise ChangedWhileRead(f"{self._name or 'the file'} shrank while it was "
                                       f"uploaded ({self._pos + got} of {self._size} bytes)")
            parts.append(buf)
            got += len(buf)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._h.update(data)
        self._pos += len(data)
        if self._pos == self._size and self._h.hexdigest() != self._digest:
            raise ChangedWhileRead(f"{self._name or 'the file'} changed while it was "
                                   "uploaded (its bytes no longer match their address)")
        return data
