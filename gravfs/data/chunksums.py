"""Per-chunk CRC32C sums of a verified object, and reads checked against them.

A large data object is verified once against its SHA-256 name (when it enters the
tier, or when the mount reads it in place from a local-directory store). Hashing
it again in every new process (a remount, a CLI command) costs a full read before
the first byte is served; with its chunk sums recorded at the first verification,
a later process checks each chunk as it reads it instead, at CRC32C speed, and
still catches a file that changed on disk since (bit rot, an edit). Sums describe
the content, so they check any copy of the object.

The sums come from the verifier's own pass over the file (``Verify`` returns them),
so recording them costs no second read.

File layout (little-endian): magic, chunk size (u32), object size (u64), one u32
CRC32C per chunk, then a CRC32C of everything before it. A sums file that does
not parse or does not match its object's size is ignored (full verification).
"""

from __future__ import annotations

import array
import os
import struct
import sys
import uuid

import google_crc32c

from gravfs.errors import CorruptDataError
from gravfs.store.modes import PRIVATE_FILE, make_dir

MAGIC = b"GRAVSUM1"
CHUNK = 1 << 20
_HEAD = struct.Struct("<8sIQ")


crc = google_crc32c.value  # of one chunk; verifiers append it per CHUNK bytes they hash


def encode(sums: array.array, size: int, chunk: int = CHUNK) -> bytes:
    body = array.array("I", sums)
    if sys.byteorder != "little":
        body.byteswap()
    data = _HEAD.pack(MAGIC, chunk, size) + body.tobytes()
    return data + struct.pack("<I", google_crc32c.value(data))


def decode(data: bytes, size: int) -> tuple[array.array, int] | None:
    """(sums, chunk size) if ``data`` is an intact sums file for ``size`` bytes, else None."""
    if len(data) < _HEAD.size + 4:
        return None
    body, (stored,) = data[:-4], struct.unpack("<I", data[-4:])
    if google_crc32c.value(body) != stored:
        return None
    magic, chunk, recorded = _HEAD.unpack_from(body)
    count = (size + chunk - 1) // chunk if chunk else -1
    if magic != MAGIC or recorded != size or len(body) - _HEAD.size != 4 * count:
        return None
    sums = array.array("I")
    sums.frombytes(body[_HEAD.size:])
    if sys.byteorder != "little":
        sums.byteswap()
    return sums, chunk


def write(path: str, data: bytes, tmp_dir: str) -> None:
    """Write atomically (temp + rename); no fsync: a lost sums file only costs a full verify."""
    make_dir(os.path.dirname(path))
    tmp = os.path.join(tmp_dir, f"{os.getpid()}-{uuid.uuid4().hex}.sums")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE), "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read(path: str, size: int) -> tuple[array.array, int] | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return decode(data, size)


# The two calls through which the local tier keeps sums of the objects it verifies
# (gravfs.store.tier.ChunkSums: the tier is given this module, it does not import it).


def load(path: str, size: int) -> "ChunkChecks | None":
    """The checks of the sums file at ``path`` for an object of ``size`` bytes, if intact."""
    return ChunkChecks.load(path, size)


def save(path: str, sums: array.array, size: int, tmp_dir: str) -> None:
    """Record the sums of an object of ``size`` bytes at ``path`` (see ``write``)."""
    write(path, encode(sums, size), tmp_dir)


class ChunkMismatch(CorruptDataError):
    """A chunk read from disk does not match its recorded sum."""

    def __init__(self, index: int, offset: int):
        super().__init__(f"chunk {index} (offset {offset}) does not match its sum")
        self.index, self.offset = index, offset


class ChunkChecks:
    """The sums of one object's file and which chunks this process has checked.

    ``pread`` checks each chunk the first time a read touches it; later reads of
    checked chunks are plain preads. Two threads may check the same chunk at once
    (both succeed or both fail): cheaper than a lock on every read.
    """

    __slots__ = ("sums", "chunk", "size", "checked")

    def __init__(self, sums: array.array, chunk: int, size: int):
        self.sums, self.chunk, self.size = sums, chunk, size
        self.checked = bytearray(len(sums))

    @classmethod
    def load(cls, path: str, size: int) -> "ChunkChecks | None":
        found = read(path, size)
        return None if found is None else cls(found[0], found[1], size)

    def pread(self, fd: int, offset: int, length: int) -> bytes:
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        chunk, checked = self.chunk, self.checked
        first, last = offset // chunk, (end - 1) // chunk
        if checked.find(0, first, last + 1) < 0:
            return os.pread(fd, end - offset, offset)
        lo, hi = first * chunk, min((last + 1) * chunk, self.size)
        buf = os.pread(fd, hi - lo, lo)
        for i in range(first, last + 1):
            if not checked[i]:
                self._check(i, buf if first == last else buf[(i - first) * chunk:(i - first + 1) * chunk])
        if lo == offset and hi == end:
            return buf
        return buf[offset - lo:end - lo]

    def check(self, offset: int, data: bytes) -> None:
        """Check ``data``, read at ``offset`` (a chunk boundary), chunk by chunk."""
        chunk = self.chunk
        if offset % chunk:
            raise ValueError(f"offset {offset} is not on a {chunk}-byte chunk boundary")
        first = offset // chunk
        for j in range(0, len(data), chunk):
            self._check(first + j // chunk, data if len(data) <= chunk else data[j:j + chunk])

    def _check(self, i: int, part: bytes) -> None:
        if (i >= len(self.sums) or len(part) != min(self.chunk, self.size - i * self.chunk)
                or crc(part) != self.sums[i]):
            raise ChunkMismatch(i, i * self.chunk)
        self.checked[i] = 1
