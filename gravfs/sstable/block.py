"""Decoding and encoding of the entries of one (uncompressed) block.

A block is a run of prefix-compressed entries
``varint shared | varint non_shared | varint value_len | key[shared:] | value``
followed by the restart array (fixed32 offsets), an optional data-block hash
index, and a fixed32 footer holding the number of restarts (high bit: hash
index present). Blocks are decoded whole into Python lists so that lookups are
a ``bisect`` away; decoding walks the entries from the start, which also
validates every length against the block end.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

from .format import (
    BLOCK_TRAILER_SIZE,
    DELETION_KINDS,
    HASH_INDEX_MAX_BLOCK_SIZE,
    KIND_VALUE,
    FormatError,
    encode_varint,
    read_varint,
    zigzag_decode,
)


def entries_end(data: bytes) -> int:
    """Offset where the entries of ``data`` end (= start of the restart array).

    It is at least 4 bytes before the end of ``data`` (the footer), so an entry
    header starting before it can always be read 3 bytes at a time; a header
    that runs past it is caught by the overrun check on the entry lengths.
    """
    return restart_array(data)[0]


def restart_array(data: bytes) -> tuple[int, int]:
    """(entries_end, number of restart points) of a block."""
    n = len(data)
    if n < 4:
        raise FormatError(f"block of {n} bytes is too short for its footer", 0)
    footer = int.from_bytes(data[n - 4 :], "little")
    num_restarts = footer
    end = n - 4
    if n <= HASH_INDEX_MAX_BLOCK_SIZE and footer >> 31:
        # Data-block hash index: buckets (1 byte each) then fixed16 bucket count,
        # between the restart array and the footer.
        num_restarts = footer & 0x7FFFFFFF
        if n < 6:
            raise FormatError("block too short for its hash index", 0)
        num_buckets = int.from_bytes(data[n - 6 : n - 4], "little")
        end = n - 6 - num_buckets
    limit = end - 4 * num_restarts
    if limit < 0:
        raise FormatError(f"block restart array ({num_restarts} restarts) does not fit in {n} bytes", n - 4)
    if num_restarts == 0 and limit != 0:
        raise FormatError("block with entries but no restart points", n - 4)
    return limit, num_restarts


def entry_header(data: bytes, p: int, limit: int) -> tuple[int, int, int, int]:
    """(shared, non_shared, value length, offset of the key bytes) of the entry at
    ``p`` < ``limit`` (entries_end): one-byte lengths (and two-byte value lengths)
    without a varint call."""
    shared = data[p]
    non_shared = data[p + 1]
    vlen = data[p + 2]
    if (shared | non_shared | vlen) < 0x80:
        return shared, non_shared, vlen, p + 3
    if (shared | non_shared) < 0x80 and data[p + 3] < 0x80:
        return shared, non_shared, (vlen & 0x7F) | (data[p + 3] << 7), p + 4
    shared, p = read_varint(data, p, limit)
    non_shared, p = read_varint(data, p, limit)
    vlen, p = read_varint(data, p, limit)
    return shared, non_shared, vlen, p


def restart_offsets(data: bytes, limit: int, restarts: int) -> Sequence[int]:
    """The restart array of a block (``restart_array`` gives limit and restarts),
    unpacked (an array: 4 bytes an offset, where a tuple of ints takes 36; a raw
    index keeps it while it serves lookups)."""
    offsets = array("I")  # (4 bytes on every platform CPython builds for Linux)
    offsets.frombytes(data[limit:limit + 4 * restarts])  # (any buffer: bytes or a view)
    if sys.byteorder == "big":
        offsets.byteswap()
    return offsets


def restart_key(data: bytes, limit: int, at: int, i: int) -> bytes:
    """Stored key of the entry at ``at``, restart point ``i`` (which shares nothing).

    A header of one-byte lengths (index entries; data entries with short values) is read
    inline."""
    if at >= limit:
        raise FormatError(f"restart point {i} at {at} is past the entries", limit + 4 * i)
    n = data[at + 1]  # (a block has at least 4 bytes past its entries: in bounds)
    if data[at] or (n | data[at + 2]) >= 0x80:
        shared, n, _, q = entry_header(data, at, limit)
        if shared:
            raise FormatError(f"restart point {i} does not start a whole key", at)
    else:
        q = at + 3
    if q + n > limit:
        raise FormatError(f"restart point {i} does not start a whole key", at)
    return data[q:q + n]


def scan_start(data: bytes, limit: int, offsets: Sequence[int], key: bytes, strip: int) -> int:
    """Where to scan from for the first entry whose key (stored key without its last
    ``strip`` bytes: an internal key's trailer) is >= ``key``: the restart point
    before the first one whose key is, found by binary search (0 if none is before).
    ``offsets``: the block's restart offsets (restart_offsets)."""
    lo, hi = 0, len(offsets)
    before = 0  # offset of restart point lo - 1 (the last one found before the key)
    while lo < hi:
        mid = (lo + hi) >> 1
        at = offsets[mid]
        stored = restart_key(data, limit, at, mid)
        if len(stored) < strip:
            raise FormatError(f"key shorter than its {strip}-byte trailer", at)
        if (stored[:-strip] if strip else stored) < key:
            lo, before = mid + 1, at
        else:
            hi = mid
    return before


def decode_entries(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """All (key, value) entries of a block with explicit value lengths, keys as stored."""
    limit = entries_end(data)
    keys: list[bytes] = []
    values: list[bytes] = []
    kappend = keys.append
    vappend = values.append
    key = b""
    p = 0
    while p < limit:
        start = p
        shared = data[p]
        non_shared = data[p + 1]
        vlen = data[p + 2]
        if (shared | non_shared | vlen) < 0x80:
            p += 3
        elif (shared | non_shared) < 0x80 and data[p + 3] < 0x80:
            # values of 128..16383 bytes (gravfs entries): two-byte value length
            vlen = (vlen & 0x7F) | (data[p + 3] << 7)
            p += 4
        else:
            shared, p = read_varint(data, p, limit)
            non_shared, p = read_varint(data, p, limit)
            vlen, p = read_varint(data, p, limit)
        q = p + non_shared
        r = q + vlen
        if r > limit or shared > len(key):
            raise FormatError("block entry overruns its block or shares more than the previous key", start)
        key = key[:shared] + data[p:q] if shared else data[p:q]
        kappend(key)
        vappend(data[q:r])
        p = r
    return keys, values


class DataBlock:
    """A decoded data block: parallel lists of user keys and values.

    ``values[i]`` is None where the entry is a deletion. ``clean`` means no
    deletions and no repeated user key, so iteration can yield straight from
    the lists. ``ref`` and ``charge`` belong to the block cache.
    """

    __slots__ = ("keys", "values", "clean", "ref", "charge")

    def __init__(self, keys: list[bytes], values: list, clean: bool, charge: int):
        self.keys = keys
        self.values = values
        self.clean = clean
        self.ref = False
        self.charge = charge


def decode_data_block(data: bytes) -> DataBlock:
    """Decode a data block whose keys are internal keys (user key + 8-byte trailer).

    One pass builds the user keys directly: the shared prefix of an entry is
    taken from the previous user key (and, in the rare case it reaches into
    the previous trailer, from that trailer), the trailer's low byte gives the
    entry kind.
    """
    limit = entries_end(data)
    keys: list[bytes] = []
    values: list = []
    kappend = keys.append
    vappend = values.append
    prev = b""  # previous user key
    prev_trailer_at = -1  # where the previous trailer sits in data (-1: see prev_trailer)
    prev_trailer = b""
    odd: list[tuple[int, int]] = []  # (index, kind) of entries that are not plain values
    repeated = False
    p = 0
    while p < limit:
        start = p
        shared = data[p]
        non_shared = data[p + 1]
        vlen = data[p + 2]
        if (shared | non_shared | vlen) < 0x80:
            p += 3
        elif (shared | non_shared) < 0x80 and data[p + 3] < 0x80:
            # values of 128..16383 bytes (gravfs entries): two-byte value length
            vlen = (vlen & 0x7F) | (data[p + 3] << 7)
            p += 4
        else:
            shared, p = read_varint(data, p, limit)
            non_shared, p = read_varint(data, p, limit)
            vlen, p = read_varint(data, p, limit)
        q = p + non_shared
        r = q + vlen
        if r > limit:
            raise FormatError("block entry overruns its block", start)
        t = q - 8
        if shared <= len(prev) and t >= p:
            key = prev[:shared] + data[p:t] if shared else data[p:t]
            kind = data[t]
            prev_trailer_at = t
        else:
            if prev_trailer_at >= 0:
                prev_trailer = data[prev_trailer_at : prev_trailer_at + 8]
            if shared > len(prev) + len(prev_trailer):
                raise FormatError("block entry shares more than the previous key", start)
            full = (prev + prev_trailer)[:shared] + data[p:q]
            if len(full) < 8:
                raise FormatError("internal key shorter than its 8-byte trailer", start)
            key = full[:-8]
            kind = full[-8]
            prev_trailer = full[-8:]
            prev_trailer_at = -1
        if kind != KIND_VALUE:
            odd.append((len(keys), kind))
        if key == prev and keys:
            repeated = True
        kappend(key)
        vappend(data[q:r])
        prev = key
        p = r
    for i, kind in odd:
        if kind in DELETION_KINDS:
            values[i] = None
        else:
            raise FormatError(f"unsupported entry kind {kind:#x} for key {keys[i]!r}", 0)
    charge = len(data) + 96 * len(keys)
    return DataBlock(keys, values, not (odd or repeated), charge)


class _Past:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PAST_BLOCK"


PAST_BLOCK = _Past()
"""seek_data_block's answer when every entry of the block sorts before the key."""


def seek_data_block(data: bytes, key: bytes) -> bytes | None | _Past:
    """The value of user ``key`` in a data block (internal keys), decoding only the
    entries from the restart point before it: bytes for a value, None when the key
    is absent or deleted, PAST_BLOCK when every entry sorts before it.

    Why: a cold point lookup reads a block once, and decoding it whole costs
    several times this search. The first entry of a user key wins (the newest),
    as in decode_data_block; every length read is checked against the block.
    """
    limit, restarts = restart_array(data)
    p = scan_start(data, limit, restart_offsets(data, limit, restarts), key, 8)
    prev = b""
    while p < limit:
        start = p
        shared, non_shared, vlen, p = entry_header(data, p, limit)
        q = p + non_shared
        r = q + vlen
        if r > limit or shared > len(prev):
            raise FormatError("block entry overruns its block or shares more than the previous key", start)
        full = prev[:shared] + data[p:q] if shared else data[p:q]
        if len(full) < 8:
            raise FormatError("internal key shorter than its 8-byte trailer", start)
        if full[:-8] >= key:
            if full[:-8] != key:
                return None
            kind = full[-8]
            if kind == KIND_VALUE:
                return data[q:r]
            if kind in DELETION_KINDS:
                return None
            raise FormatError(f"unsupported entry kind {kind:#x} for key {key!r}", start)
        prev = full
        p = r
    return PAST_BLOCK


def decode_index_block(
    data: bytes, key_is_user_key: bool, value_delta_encoded: bool
) -> tuple[list[bytes], list[int], list[int]]:
    """Decode an index block (or an index partition / top-level index) into
    (separator user keys, block offsets, block sizes)."""
    if not value_delta_encoded:
        ikeys, raw_values = decode_entries(data)
        offsets: list[int] = []
        sizes: list[int] = []
        for v in raw_values:
            off, p = read_varint(v, 0, len(v))
            size, p = read_varint(v, p, len(v))
            offsets.append(off)
            sizes.append(size)
        keys = ikeys
    else:
        keys, offsets, sizes = _decode_delta_index(data)
    if not key_is_user_key:
        if keys and min(map(len, keys)) < 8:
            raise FormatError("index key shorter than its 8-byte trailer", 0)
        keys = [k[:-8] for k in keys]
    return keys, offsets, sizes


def _decode_delta_index(data: bytes) -> tuple[list[bytes], list[int], list[int]]:
    # Entries carry no value length. A value is a full BlockHandle when the key
    # shares no bytes with the previous one (always so at restart points), else
    # a signed size delta, the offset following the previous block and trailer.
    limit = entries_end(data)
    keys: list[bytes] = []
    offsets: list[int] = []
    sizes: list[int] = []
    key = b""
    off = size = -1
    p = 0
    while p < limit:
        start = p
        shared, p = read_varint(data, p, limit)
        non_shared, p = read_varint(data, p, limit)
        q = p + non_shared
        if q > limit or shared > len(key):
            raise FormatError("index entry overruns its block or shares more than the previous key", start)
        key = key[:shared] + data[p:q] if shared else data[p:q]
        p = q
        if shared == 0:
            off, p = read_varint(data, p, limit)
            size, p = read_varint(data, p, limit)
        else:
            if off < 0:
                raise FormatError("delta-encoded index value without a preceding handle", start)
            delta, p = read_varint(data, p, limit)
            off = off + size + BLOCK_TRAILER_SIZE
            size = size + zigzag_decode(delta)
            if size < 0:
                raise FormatError("delta-encoded index value gives a negative block size", start)
        keys.append(key)
        offsets.append(off)
        sizes.append(size)
    return keys, offsets, sizes


def encode_block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """Encode sorted entries as a block with restart interval 1 (no prefix sharing),
    as RocksDB does for metaindex and properties blocks."""
    out = bytearray()
    restarts = []
    for k, v in entries:
        restarts.append(len(out))
        out += b"\x00" + encode_varint(len(k)) + encode_varint(len(v)) + k + v
    return _with_restarts(out, restarts)


def encode_data_block(keys: list[bytes], values: list[bytes], restart_interval: int = 16) -> bytes:
    """Encode entries (internal keys, ascending) as a data block the way RocksDB's
    block builder does: keys prefix-compressed against the previous one, a
    restart point (no sharing) every ``restart_interval`` entries."""
    out = bytearray()
    restarts: list[int] = []
    prev = b""
    for i, (k, v) in enumerate(zip(keys, values)):
        if i % restart_interval == 0:
            restarts.append(len(out))
            shared = 0
        else:
            n = min(len(prev), len(k))
            shared = 0
            while shared < n and prev[shared] == k[shared]:
                shared += 1
        out += encode_varint(shared) + encode_varint(len(k) - shared) + encode_varint(len(v))
        out += k[shared:]
        out += v
        prev = k
    return _with_restarts(out, restarts)


def _with_restarts(out: bytearray, restarts: list[int]) -> bytes:
    """A block's entries followed by its restart array and restart count."""
    if not restarts:
        restarts.append(0)
    for r in restarts:
        out += r.to_bytes(4, "little")
    out += len(restarts).to_bytes(4, "little")
    return bytes(out)
