"""Value records and their content-derived IDs.

A value record is (key, identity, data). Inside an SST its value is stored in
lakeFS's encoding ``zigzag-varint len(identity) | identity | zigzag-varint
len(data) | data`` (Go ``binary.PutVarint``); trailing bytes are ignored so
lakeFS files that append fields stay readable.

IDs follow the seed formula of the design brief, with SHA-256 digests
concatenated raw and the result written as lowercase hex:

    valueRecordID = h(h(key) || h(identity))
    rangeID       = h(valueRecordID_1 || ... || valueRecordID_n)
    metarangeID   = the same over (range max key, range id as 64 ASCII hex)

so an ID depends on logical content only, never on SST bytes (RocksDB's
writer is not byte-deterministic).  The empty tree is ``h()`` = EMPTY_ID and
needs no stored object.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, NamedTuple

from gravfs.errors import CorruptDataError
from gravfs.sstable.format import encode_varint

try:  # CPython's built-in SHA-256 has less per-call overhead than OpenSSL's for short inputs
    from _sha256 import sha256 as _sha
except ImportError:  # pragma: no cover
    _sha = hashlib.sha256


def sha256_for_short_inputs():
    """The faster SHA-256 for the writers' per-record hashing (same digests either way).

    OpenSSL's uses the CPU's SHA instructions where there are some (x86 SHA-NI,
    ARMv8 SHA2), which outweighs its larger per-call overhead; without them
    CPython's built-in one is faster on inputs this short.
    """
    try:
        with open("/proc/cpuinfo", "rb") as f:
            flags = set(f.read(1 << 16).split())
    except OSError:
        return _sha
    return hashlib.sha256 if flags & {b"sha_ni", b"sha2"} else _sha


class Record(NamedTuple):
    """One committed entry: path key, identity (what makes it "the same"), payload."""

    key: bytes
    identity: bytes
    data: bytes


EMPTY_ID: str = _sha(b"").hexdigest()
"""ID of the tree with no records: the hash of an empty ID chain; never stored."""


# --- zigzag varints (Go binary.PutVarint / binary.Varint) -------------------

def put_varint(x: int) -> bytes:
    """Signed varint exactly as Go's binary.PutVarint writes it."""
    ux = x << 1
    if x < 0:
        ux = ~ux
    return encode_varint(ux)


# Encoded lengths for the common sizes, so encoding a value is two slices.
_LEN_TABLE_SIZE = 1 << 13
_LEN = [put_varint(n) for n in range(_LEN_TABLE_SIZE)]


def _enc_len(n: int) -> bytes:
    return _LEN[n] if n < _LEN_TABLE_SIZE else put_varint(n)


def read_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Decode a signed varint at ``pos``; returns (value, new position)."""
    ux = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise CorruptDataError("truncated varint in record value", offset=pos)
        b = buf[pos]
        pos += 1
        ux |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptDataError("varint overflows 64 bits in record value", offset=pos)
    x = ux >> 1
    if ux & 1:
        x = ~x
    return x, pos


def encode_value(identity: bytes, data: bytes) -> bytes:
    """lakeFS value encoding of (identity, data)."""
    return _enc_len(len(identity)) + identity + _enc_len(len(data)) + data


def _identity_span(buf) -> tuple[int, int, int]:
    """(start, end) of an encoded value's identity, and the value's size."""
    n = len(buf)
    b = buf[0] if n else 0x80
    if b < 0x80 and not b & 1:
        ilen, pos = b >> 1, 1
    else:
        ilen, pos = read_varint(buf, 0)
    end = pos + ilen
    if ilen < 0 or end > n:
        raise CorruptDataError(f"record identity length {ilen} exceeds value size {n}")
    return pos, end, n


def decode_value(buf) -> tuple[bytes, bytes]:
    """Split an encoded value into (identity, data); raises CorruptDataError."""
    pos, end, n = _identity_span(buf)
    identity = bytes(buf[pos:end])
    pos = end
    b = buf[pos] if pos < n else 0x80
    if b < 0x80 and not b & 1:
        dlen, pos = b >> 1, pos + 1
    else:
        dlen, pos = read_varint(buf, pos)
    end = pos + dlen
    if dlen < 0 or end > n:
        raise CorruptDataError(f"record data length {dlen} exceeds value size {n}")
    return identity, bytes(buf[pos:end])


_new_record = tuple.__new__


def decode_record(key: bytes, value: bytes) -> Record:
    """Record from a key and its encoded value (fast path for the common lengths)."""
    try:
        b = value[0]
        if b < 0x80 and not b & 1:
            p = 1 + (b >> 1)
            c = value[p]
            if c < 0x80:
                if not c & 1:
                    e = p + 1 + (c >> 1)
                    if e <= len(value):
                        return _new_record(Record, (key, value[1:p], value[p + 1:e]))
            else:
                d = value[p + 1]
                if d < 0x80 and not c & 1:
                    e = p + 2 + (((c & 0x7F) | (d << 7)) >> 1)
                    if e <= len(value):
                        return _new_record(Record, (key, value[1:p], value[p + 2:e]))
    except IndexError:
        pass
    ident, data = decode_value(value)
    return _new_record(Record, (key, ident, data))


def decode_identity(buf) -> bytes:
    """Only the identity of an encoded value (cheaper than decode_value)."""
    pos, end, _ = _identity_span(buf)
    return bytes(buf[pos:end])


# --- IDs --------------------------------------------------------------------

def value_record_id(key: bytes, identity: bytes) -> bytes:
    """Raw 32-byte valueRecordID = h(h(key) || h(identity))."""
    return _sha(_sha(key).digest() + _sha(identity).digest()).digest()


class IDBuilder:
    """Incremental range/metarange ID: feed records in key order, read ``hexdigest``."""

    __slots__ = ("_h", "count")

    def __init__(self) -> None:
        self._h = _sha()
        self.count = 0

    def add(self, key: bytes, identity: bytes) -> None:
        self._h.update(_sha(_sha(key).digest() + _sha(identity).digest()).digest())
        self.count += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def range_id(records: Iterable[tuple[bytes, bytes]]) -> str:
    """ID of a range holding these (key, identity, ...) records, in key order."""
    b = IDBuilder()
    for rec in records:
        b.add(rec[0], rec[1])
    return b.hexdigest()


def metarange_id(ranges: Iterable[tuple[bytes, str]]) -> str:
    """ID of a metarange over (range max key, range id hex) pairs, in key order."""
    b = IDBuilder()
    for max_key, rid in ranges:
        b.add(max_key, rid.encode("ascii"))
    return b.hexdigest()
