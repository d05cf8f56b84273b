"""Write SSTables with rocksdict's SstFileWriter, then add user properties.

rocksdict has no TablePropertiesCollector, so user properties are added by
rewriting the tail of the finished file. In a block-based table the
properties block comes after the data, filter, index, compression-dictionary
and range-deletion blocks and is followed only by the metaindex block and the
footer. We truncate at the properties block, then append a new properties
block (RocksDB's entries plus the caller's, sorted by name), a new metaindex
block pointing at it (other meta handles unchanged) and a new footer (index
handle unchanged), each block with its 5-byte trailer. RocksDB, sst_dump and
Pebble read the result like any other table.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import rocksdict

from .block import decode_entries, encode_block
from .format import (
    BLOCK_TRAILER_SIZE,
    FOOTER_SIZE,
    FormatError,
    block_checksum,
    block_with_trailer,
    decode_handle,
    encode_footer,
    encode_handle,
    parse_footer,
)
from .properties import LEGACY_PROPERTIES_BLOCK, PROPERTIES_BLOCK, RESERVED_PREFIX

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
COMPRESSIONS = ("snappy", "none")


@dataclass(frozen=True)
class SSTInfo:
    """What was written: file size in bytes, entry count, first and last key."""

    size: int
    count: int
    first_key: bytes
    last_key: bytes


_options_cache: dict[tuple[str, int], rocksdict.Options] = {}


def _options(compression: str, block_size: int) -> rocksdict.Options:
    key = (compression, block_size)
    opts = _options_cache.get(key)
    if opts is None:
        table = rocksdict.BlockBasedOptions()
        table.set_format_version(FORMAT_VERSION)
        table.set_checksum_type(rocksdict.ChecksumType.crc32c())
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        table.set_block_size(block_size)
        opts = rocksdict.Options(raw_mode=True)
        opts.set_block_based_table_factory(table)
        codec = rocksdict.DBCompressionType.snappy() if compression == "snappy" else rocksdict.DBCompressionType.none()
        opts.set_compression_type(codec)
        _options_cache[key] = opts
    return opts


def _normalize_properties(properties: Mapping[str, bytes] | None) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for name, value in (properties or {}).items():
        if not isinstance(name, str):
            raise TypeError(f"property name must be str, not {type(name).__name__}")
        raw = name.encode("utf-8")
        if raw.startswith(RESERVED_PREFIX):
            raise ValueError(f"property name {name!r} is reserved for RocksDB")
        if not name:
            raise ValueError("property name must not be empty")
        if isinstance(value, str):
            raise TypeError(f"property {name!r} must be bytes, not str")
        out[raw] = bytes(value)
    return out


@contextmanager
def built_beside(path: str, sync: bool = True) -> Iterator[str]:
    """A temp name beside ``path`` to build a file in: when the block ends, the file
    is synced (``sync``) and renamed to ``path``; when it raises, removed. So
    ``path`` never holds a partial file. Unique per call: content-addressed paths
    can be written by several threads or processes at once."""
    tmp = f"{path}.{secrets.token_hex(6)}.tmp"
    try:
        yield tmp
        if sync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_sst(
    path: str,
    items: Iterable[tuple[bytes, bytes]],
    properties: Mapping[str, bytes] | None = None,
    compression: str = "snappy",
    block_size: int = 4096,
    *,
    sync: bool = True,
) -> SSTInfo:
    """Write ``items`` (strictly ascending keys, at least one) to an SSTable at ``path``.

    The table is built in a temp file beside ``path`` (``path.<random>.tmp``)
    and renamed into place, so ``path`` never holds a partial file. ``properties`` become user properties of the
    table. ``sync`` fsyncs the file before the rename. Raises ValueError for
    no items or keys that are not strictly ascending, TypeError for non-bytes.
    """
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    if not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive int, not {block_size!r}")
    user_props = _normalize_properties(properties)
    with built_beside(path, sync) as tmp:
        writer = rocksdict.SstFileWriter(_options(compression, block_size))
        try:
            writer.open(tmp)
        except Exception as e:
            raise OSError(f"cannot create {tmp}: {e}") from None
        try:
            count, first, last = _add_all(writer, items)
            if count == 0:
                raise ValueError("cannot write an SSTable with no items")
            writer.finish()
        finally:
            del writer  # lets go of the file before it is renamed or removed
        if user_props:
            _add_user_properties(tmp, user_props)
    size = os.path.getsize(path)
    return SSTInfo(size=size, count=count, first_key=first, last_key=last)


def _add_all(writer: rocksdict.SstFileWriter, items: Iterable[tuple[bytes, bytes]]) -> tuple[int, bytes, bytes]:
    # The hot loop does nothing but hand items to RocksDB: SstFileWriter itself
    # rejects keys that are not strictly ascending, and we translate its error.
    n = 0
    k = b""
    try:
        it = iter(items)
        for first, v in it:
            k = first
            writer[k] = v
            n = 1
            break
        else:
            return 0, b"", b""
        for k, v in it:
            writer[k] = v
            n += 1
    except Exception as e:
        msg = str(e)
        if "ascending order" in msg:
            raise ValueError(
                f"keys must be strictly ascending without duplicates: item {n} ({k!r}) "
                "is not greater than the one before it"
            ) from None
        if "only support bytes" in msg:
            raise TypeError(f"keys and values must be bytes (item {n})") from None
        raise
    return n, first, k


def _add_user_properties(path: str, user_props: dict[bytes, bytes]) -> None:
    """Rewrite the properties block, metaindex and footer of a finished table."""
    with open(path, "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - FOOTER_SIZE))
        footer = parse_footer(f.read(), size)
        checksum_type = footer.checksum_type

        def read_block(offset: int, length: int, what: str) -> bytes:
            f.seek(offset)
            raw = f.read(length + BLOCK_TRAILER_SIZE)
            if len(raw) != length + BLOCK_TRAILER_SIZE:
                raise FormatError(f"{what} block past end of file", offset)
            if raw[length] != 0:
                raise FormatError(f"{what} block is compressed; cannot rewrite", offset)
            if block_checksum(checksum_type, raw[: length + 1]) != int.from_bytes(raw[length + 1 :], "little"):
                raise FormatError(f"{what} block checksum mismatch in freshly written table", offset)
            return raw[:length]

        meta_names, meta_values = decode_entries(
            read_block(footer.metaindex_offset, footer.metaindex_size, "metaindex")
        )
        meta = dict(zip(meta_names, meta_values))
        prop_name = PROPERTIES_BLOCK if PROPERTIES_BLOCK in meta else LEGACY_PROPERTIES_BLOCK
        if prop_name not in meta:
            raise FormatError("table has no properties block")
        p_off, p_size, _ = decode_handle(meta[prop_name], 0, len(meta[prop_name]))
        # Everything we drop must be exactly properties + metaindex + footer.
        for name, value in meta.items():
            if name != prop_name:
                o, s, _ = decode_handle(value, 0, len(value))
                if o + s + BLOCK_TRAILER_SIZE > p_off:
                    raise FormatError(f"meta block {name!r} lies after the properties block; cannot rewrite")
        if footer.index_offset + footer.index_size + BLOCK_TRAILER_SIZE > p_off:
            raise FormatError("index block lies after the properties block; cannot rewrite")
        if p_off + p_size + BLOCK_TRAILER_SIZE != footer.metaindex_offset:
            raise FormatError("unexpected bytes between properties and metaindex blocks")

        names, values = decode_entries(read_block(p_off, p_size, "properties"))
        merged = dict(zip(names, values))
        merged.update(user_props)
        props_block = encode_block(sorted(merged.items()))
        meta[prop_name] = encode_handle(p_off, len(props_block))
        meta_block = encode_block(sorted(meta.items()))
        meta_off = p_off + len(props_block) + BLOCK_TRAILER_SIZE
        tail = (
            block_with_trailer(props_block, checksum_type)
            + block_with_trailer(meta_block, checksum_type)
            + encode_footer(footer, (meta_off, len(meta_block)), (footer.index_offset, footer.index_size))
        )
        f.seek(p_off)
        f.write(tail)
        f.truncate()
    log.debug("added %d user properties to %s", len(user_props), path)
