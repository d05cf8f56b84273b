"""Byte-level facts of the RocksDB block-based table format.

Shared by the reader (decoding) and the writer (which rewrites the properties
block, the metaindex block and the footer of a finished file). Everything here
works on plain ``bytes`` and raises :class:`FormatError` with an offset
relative to the buffer it was given; callers translate that into
``CorruptDataError`` with the file name and absolute offset.
"""

from __future__ import annotations

import bz2
import zlib
from dataclasses import dataclass

import cramjam
import google_crc32c
import xxhash

# Table magic numbers (the last 8 bytes of a file, little endian).
LEGACY_BLOCK_BASED_MAGIC = 0xDB4775248B80FB57
BLOCK_BASED_MAGIC = 0x88E241B785F4CFF7
_OTHER_MAGICS = {
    0x4F3418EB7A8F13B8: "legacy plain table",
    0x8242229663BF9564: "plain table",
    0x926789D0C5F17873: "cuckoo table",
}

LEGACY_FOOTER_SIZE = 48  # two handles padded to 40 bytes + magic
FOOTER_SIZE = 53  # checksum type + 40 bytes of handles + version + magic
HANDLES_AREA = 40  # 2 * BlockHandle::kMaxEncodedLength
MAX_FORMAT_VERSION = 5

BLOCK_TRAILER_SIZE = 5  # compression type byte + fixed32 checksum

# Checksum types (footer byte).
NO_CHECKSUM = 0
CRC32C = 1
XXHASH = 2
XXHASH64 = 3
XXH3 = 4
CHECKSUM_NAMES = {NO_CHECKSUM: "none", CRC32C: "crc32c", XXHASH: "xxhash", XXHASH64: "xxhash64", XXH3: "xxh3"}

# Compression type bytes (block trailer).
NO_COMPRESSION = 0
SNAPPY = 1
ZLIB = 2
BZIP2 = 3
LZ4 = 4
LZ4HC = 5
XPRESS = 6
ZSTD = 7
ZSTD_NOT_FINAL = 0x40

# Value types in the 8-byte internal-key trailer (low byte of seq << 8 | type).
KIND_DELETION = 0x0
KIND_VALUE = 0x1
KIND_MERGE = 0x2
KIND_SINGLE_DELETION = 0x7
KIND_DELETION_WITH_TIMESTAMP = 0x14
DELETION_KINDS = frozenset({KIND_DELETION, KIND_SINGLE_DELETION, KIND_DELETION_WITH_TIMESTAMP})

# Index types (property rocksdb.block.based.table.index.type, fixed32).
INDEX_BINARY_SEARCH = 0
INDEX_HASH_SEARCH = 1  # a binary-search index plus prefix metadata we do not need
INDEX_TWO_LEVEL = 2
INDEX_BINARY_SEARCH_WITH_FIRST_KEY = 3

HASH_INDEX_MAX_BLOCK_SIZE = 1 << 16  # larger blocks never carry a data-block hash index

_CRC_MASK_DELTA = 0xA282EAD8
_XXH3_LAST_BYTE_PRIME = 0x6B9083D9
_M32 = 0xFFFFFFFF


class FormatError(Exception):
    """Bytes that do not parse; ``offset`` is relative to the parsed buffer."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset


# ---------------------------------------------------------------- varints


def read_varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """Decode an unsigned LEB128 varint (at most 64 bits) at ``pos``; return (value, next pos)."""
    if pos >= limit:
        raise FormatError("varint runs past the end of its block", pos)
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    start = pos
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= limit:
            raise FormatError("varint runs past the end of its block", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >> 64:
                raise FormatError("varint overflows 64 bits", start)
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint longer than 10 bytes", start)


def zigzag_decode(n: int) -> int:
    """Signed value of a zigzag-encoded varint (RocksDB's Varsignedint64)."""
    return (n >> 1) ^ -(n & 1)


def encode_varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_handle(buf: bytes, pos: int, limit: int) -> tuple[int, int, int]:
    """A BlockHandle (varint64 offset, varint64 size) at ``pos``: (offset, size, next pos)."""
    off, pos = read_varint(buf, pos, limit)
    size, pos = read_varint(buf, pos, limit)
    return off, size, pos


def encode_handle(offset: int, size: int) -> bytes:
    return encode_varint(offset) + encode_varint(size)


# ---------------------------------------------------------------- footer


@dataclass(frozen=True)
class Footer:
    format_version: int
    checksum_type: int
    metaindex_offset: int
    metaindex_size: int
    index_offset: int
    index_size: int
    offset: int  # where the footer starts in the file: blocks must end before it
    magic: int


def parse_footer(tail: bytes, file_size: int) -> Footer:
    """Parse the footer from ``tail`` (the last bytes of the file, at least 53 of them
    unless the file is shorter). Offsets in errors are absolute file offsets."""
    base = file_size - len(tail)
    if file_size < LEGACY_FOOTER_SIZE:
        raise FormatError(f"file is too short ({file_size} bytes) to be an SSTable", 0)
    magic = int.from_bytes(tail[-8:], "little")
    if magic == LEGACY_BLOCK_BASED_MAGIC:
        footer_len = LEGACY_FOOTER_SIZE
        start = len(tail) - footer_len
        version = 0
        checksum = CRC32C
        pos = start
    elif magic == BLOCK_BASED_MAGIC:
        footer_len = FOOTER_SIZE
        if file_size < footer_len:
            raise FormatError(f"file is too short ({file_size} bytes) to be an SSTable", 0)
        start = len(tail) - footer_len
        version = int.from_bytes(tail[-12:-8], "little")
        if version > MAX_FORMAT_VERSION:
            raise FormatError(f"unsupported table format_version {version}", base + len(tail) - 12)
        checksum = tail[start]
        if checksum not in CHECKSUM_NAMES:
            raise FormatError(f"unsupported checksum type {checksum}", base + start)
        pos = start + 1
    else:
        what = _OTHER_MAGICS.get(magic)
        if what:
            raise FormatError(f"{what} files are not supported (only block-based tables)", file_size - 8)
        raise FormatError(f"bad table magic number {magic:#018x} (not an SSTable or truncated)", file_size - 8)
    limit = len(tail) - 8 - (4 if footer_len == FOOTER_SIZE else 0)
    try:
        mo, ms, pos = decode_handle(tail, pos, limit)
        io, is_, pos = decode_handle(tail, pos, limit)
    except FormatError as e:
        raise FormatError(f"bad block handle in footer: {e}", base + start) from None
    footer_off = file_size - footer_len
    return Footer(version, checksum, mo, ms, io, is_, footer_off, magic)


def encode_footer(footer: Footer, metaindex: tuple[int, int], index: tuple[int, int]) -> bytes:
    """Encode a footer like ``footer`` but with new metaindex/index handles."""
    handles = encode_handle(*metaindex) + encode_handle(*index)
    if len(handles) > HANDLES_AREA:
        raise ValueError("block handles too large for the footer")
    handles += bytes(HANDLES_AREA - len(handles))
    if footer.magic == LEGACY_BLOCK_BASED_MAGIC:
        return handles + footer.magic.to_bytes(8, "little")
    return (
        bytes([footer.checksum_type])
        + handles
        + footer.format_version.to_bytes(4, "little")
        + footer.magic.to_bytes(8, "little")
    )


# ---------------------------------------------------------------- checksums


def mask_crc32c(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & _M32) + _CRC_MASK_DELTA) & _M32


def block_checksum(checksum_type: int, data_and_type: bytes) -> int:
    """Checksum RocksDB stores in a block trailer, over the block contents followed by
    the compression type byte (i.e. everything but the last 4 trailer bytes)."""
    if checksum_type == CRC32C:
        return mask_crc32c(google_crc32c.value(data_and_type))
    if checksum_type == XXHASH:
        return xxhash.xxh32_intdigest(data_and_type, 0)
    if checksum_type == XXHASH64:
        return xxhash.xxh64_intdigest(data_and_type, 0) & _M32
    if checksum_type == XXH3:
        if not data_and_type:
            return 0
        v = xxhash.xxh3_64_intdigest(data_and_type[:-1]) & _M32
        return v ^ ((data_and_type[-1] * _XXH3_LAST_BYTE_PRIME) & _M32)
    if checksum_type == NO_CHECKSUM:
        return 0
    raise FormatError(f"unsupported checksum type {checksum_type}")


def block_with_trailer(contents: bytes, checksum_type: int, ctype: int = NO_COMPRESSION) -> bytes:
    """A block as stored: contents (compressed with ``ctype``), type byte, fixed32 checksum."""
    body = contents + bytes((ctype,))
    return body + block_checksum(checksum_type, body).to_bytes(4, "little")


# ---------------------------------------------------------------- compression


def decompress(ctype: int, data: bytes, format_version: int) -> bytes:
    """Uncompress a block's stored bytes. Raises FormatError on bad input."""
    try:
        if ctype == SNAPPY:
            return bytes(cramjam.snappy.decompress_raw(data))
        if ctype in (ZLIB, BZIP2, LZ4, LZ4HC, ZSTD, ZSTD_NOT_FINAL):
            if format_version >= 2 or ctype in (ZSTD, ZSTD_NOT_FINAL):
                # compress_format_version 2: varint32 uncompressed size, then the codec's bytes.
                size, pos = read_varint(data, 0, min(len(data), 5))
            elif ctype in (ZLIB, BZIP2):
                size, pos = -1, 0  # version 1 zlib/bzip2: bare stream, size unknown
            else:
                # version 1 LZ4: the size as 8 bytes, little endian.
                if len(data) < 8:
                    raise FormatError("compressed block too short for its size header")
                size, pos = int.from_bytes(data[:8], "little"), 8
            body = data[pos:]
            if ctype == ZLIB:
                d = zlib.decompressobj(-15)
                out = d.decompress(body) if size < 0 else d.decompress(body, size + 1)
                if not d.eof:
                    raise FormatError("truncated zlib stream")
                if size < 0:
                    return out
            elif ctype == BZIP2:
                out = bz2.decompress(body)
                if size < 0:
                    return out
            elif ctype in (LZ4, LZ4HC):
                out = bytes(cramjam.lz4.decompress_block(body, output_len=size))
            else:
                out = bytes(cramjam.zstd.decompress(body, output_len=size))
            if len(out) != size:
                raise FormatError(f"block uncompressed to {len(out)} bytes, header says {size}")
            return out
    except FormatError:
        raise
    except Exception as e:  # codec libraries raise their own types
        raise FormatError(f"cannot decompress block (compression type {ctype}): {e}") from None
    raise FormatError(f"unsupported compression type {ctype}")
