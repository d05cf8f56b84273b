"""The handle protocol: what acquiring a data object gives its reader.

One protocol for every way an object's bytes are held: a tier copy
(gravfs.store.tier.TierHandle, which follows it without knowing it), a
pending upload's local file, an object read into memory, a sparse file's
extents. Readers use only this, so where the bytes are is not their concern.
"""

from __future__ import annotations

import os
from typing import Optional, Protocol


class Handle(Protocol):
    """An object's bytes, kept readable until ``release`` (or the ``with`` block ends)."""

    path: Optional[str]  # a local file with exactly these bytes, or None
    size: int

    def read(self, offset: int = 0, length: Optional[int] = None, fd: int = -1) -> bytes:
        """Bytes at ``offset`` (to the end without ``length``); ``fd``: the caller's own
        descriptor of ``path``, read without the handle's lock."""
        ...

    def release(self) -> None:
        ...

    def __enter__(self) -> "Handle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class PendingHandle(Handle):
    """A pending object's local file, read like a tier handle (hash known: not verified)."""

    def __init__(self, path: str, fd: int):
        self.path, self._fd = path, fd
        self.size = os.fstat(fd).st_size

    def read(self, offset: int = 0, length: Optional[int] = None, fd: int = -1) -> bytes:
        if length is None:
            length = max(0, self.size - offset)
        return os.pread(self._fd if fd < 0 else fd, length, offset)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.release()


class BytesHandle(Handle):
    """An object read into memory, served like a tier handle (no local file)."""

    def __init__(self, data: bytes):
        self.path = None
        self._data = data
        self.size = len(data)

    def read(self, offset: int = 0, length: Optional[int] = None, fd: int = -1) -> bytes:
        end = self.size if length is None else offset + length
        return self._data[offset:end]

    def release(self) -> None:
        self._data = b""
