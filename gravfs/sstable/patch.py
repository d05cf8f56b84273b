"""A new table from an old one plus a few edits, copying untouched data blocks byte for byte.

Rewriting a 3,000-entry table for one changed entry through SstFileWriter costs
decoding and re-encoding every entry; here only the data blocks the edits fall
in are decoded and encoded again. The other blocks are copied as stored (with
their trailers: in format_version 2 a block's checksum does not depend on where
it sits), and a new index, properties block, metaindex and footer are written.
The old index separators stay valid for copied blocks: an edit that falls after
a block's last key but not after its separator is applied to that block, so the
block following a separator never gains a key at or below it.

Only tables as SstFileWriter writes them qualify (one index level, one version
per key, no meta blocks other than the properties): :class:`TablePatch` says so
with ``ok``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

import cramjam

from .block import DataBlock, encode_block, encode_data_block
from .format import (
    BLOCK_TRAILER_SIZE,
    KIND_VALUE,
    NO_COMPRESSION,
    SNAPPY,
    block_with_trailer,
    encode_footer,
    encode_handle,
    encode_varint,
    read_varint,
)
from .properties import PROPERTIES_BLOCK, RESERVED_PREFIX
from .reader import SSTReader
from .writer import SSTInfo, _normalize_properties, built_beside

# seq 0, kind value: what SstFileWriter gives every entry, and a valid index-key trailer
# for any separator (it sorts after every entry of its block with the same user key)
TRAILER = (KIND_VALUE).to_bytes(8, "little")

# Table properties that describe the data and index: recomputed for the new table;
# the others (comparator, compression, creation identity...) are kept as they are.
_COUNTS = ("rocksdb.data.size", "rocksdb.index.size", "rocksdb.num.data.blocks",
           "rocksdb.num.entries", "rocksdb.raw.key.size", "rocksdb.raw.value.size",
           "rocksdb.tail.start.offset")


class TablePatch:
    """Sorted edits ``(key, value or None to delete)`` laid over ``reader``'s blocks.

    ``old_values[i]`` is the value the table holds at edit i's key (None where it
    holds none). Only the blocks the edits fall in are decoded. ``bounds``, the
    table's first and last keys when the caller knows them, save decoding an
    unedited end block for them.
    """

    def __init__(self, reader: SSTReader, edits: list[tuple[bytes, bytes | None]],
                 bounds: tuple[bytes, bytes] | None = None):
        self.reader = reader
        self.bounds = bounds
        self.old_values: list[bytes | None] = []
        self.ok = (reader.single_version and not reader._two_level
                   and set(reader._meta) == {PROPERTIES_BLOCK} and bool(reader._index_keys))
        if not self.ok:
            return
        seps = reader._index_keys
        # block index -> (first edit, end of its edits)
        self.spans: dict[int, tuple[int, int]] = {}
        i = 0
        while i < len(edits):
            b = self.block_of(edits[i][0])
            j = i + 1
            while j < len(edits) and (b == len(seps) - 1 or edits[j][0] <= seps[b]):
                j += 1
            self.spans[b] = (i, j)
            i = j
        self.blocks: dict[int, tuple[list[bytes], list[bytes]]] = {}  # the new entries
        self.old: dict[int, DataBlock] = {}  # the same blocks as they were
        for b, (i, j) in self.spans.items():
            blk = self.old[b] = self._decode(b)
            keys, values = blk.keys, blk.values
            out_k: list[bytes] = []
            out_v: list[bytes] = []
            p = 0
            for key, value in edits[i:j]:
                q = bisect_left(keys, key, p)
                out_k += keys[p:q]
                out_v += values[p:q]
                if q < len(keys) and keys[q] == key:
                    self.old_values.append(values[q])
                    q += 1
                else:
                    self.old_values.append(None)
                if value is not None:
                    out_k.append(key)
                    out_v.append(value)
                p = q
            out_k += keys[p:]
            out_v += values[p:]
            self.blocks[b] = (out_k, out_v)

    def block_of(self, key: bytes) -> int:
        """The data block an edit of ``key`` goes to: the first whose separator is not
        below it (the last block for keys past every separator)."""
        seps = self.reader._index_keys
        return min(bisect_left(seps, key), len(seps) - 1)

    def neighbours(self, key: bytes) -> tuple[tuple[bytes, bytes] | None, tuple[bytes, bytes] | None]:
        """The old entries right after and right before ``key`` in its block (each
        (key, value), or None), for a key an edit inserts."""
        blk = self.old.get(self.block_of(key))
        if blk is None:
            return None, None
        i = bisect_left(blk.keys, key)
        after = (blk.keys[i], blk.values[i]) if i < len(blk.keys) else None
        before = (blk.keys[i - 1], blk.values[i - 1]) if i > 0 else None
        return after, before

    def first_key(self) -> bytes | None:
        """The smallest key of the new table (None when the edits delete everything)."""
        return self._edge(range(len(self.reader._index_keys)), 0)

    def last_key(self) -> bytes | None:
        """The largest key of the new table (None when the edits delete everything)."""
        return self._edge(reversed(range(len(self.reader._index_keys))), -1)

    def _edge(self, order, end: int) -> bytes | None:
        for n, b in enumerate(order):
            if b in self.blocks:
                if self.blocks[b][0]:
                    return self.blocks[b][0][end]
            elif n == 0 and self.bounds is not None:
                return self.bounds[end]  # the old table's own end, untouched
            else:
                return self._decode(b).keys[end]
        return None

    def _decode(self, b: int) -> DataBlock:
        r = self.reader
        return r._block(r._index_offsets[b], r._index_sizes[b], fill_cache=False)

    def write(self, path: str, properties: Mapping[str, bytes] | None = None,
              compression: str = "snappy", block_size: int = 4096, *, sync: bool = True) -> SSTInfo:
        """Write the new table to ``path`` (built beside it, renamed into place);
        ``properties`` replace the user properties. Raises ValueError when the
        edits leave the table empty."""
        r = self.reader
        ck = r._checksum_type
        seps, offs, sizes = r._index_keys, r._index_offsets, r._index_sizes
        r.prefetch()  # the unchanged blocks are copied: all but a few
        pieces: list = []
        index: list[tuple[bytes, bytes]] = []
        pos = 0
        entries = r.num_entries
        key_bytes = value_bytes = 0  # changes to the raw sizes
        for b in range(len(seps)):
            if b not in self.blocks:
                stored = r._slice(offs[b], offs[b] + sizes[b] + BLOCK_TRAILER_SIZE)
                pieces.append(stored)
                index.append((seps[b] + TRAILER, encode_handle(pos, sizes[b])))
                pos += len(stored)
                continue
            keys, values = self.blocks[b]
            old = self.old[b]
            entries += len(keys) - len(old.keys)
            key_bytes += sum(map(len, keys)) - sum(map(len, old.keys)) + 8 * (len(keys) - len(old.keys))
            value_bytes += sum(map(len, values)) - sum(map(len, old.values))
            for ks, vs in _chunks(keys, values, block_size):
                raw = encode_data_block([k + TRAILER for k in ks], vs)
                stored, ctype = _compressed(raw, compression)
                block = block_with_trailer(stored, ck, ctype)
                pieces.append(block)
                index.append((ks[-1] + TRAILER, encode_handle(pos, len(stored))))
                pos += len(block)
        if not index:
            raise ValueError("the edits leave the table empty")
        data_size = pos
        index_block = encode_block(index)
        index_handle = (pos, len(index_block))
        pieces.append(block_with_trailer(index_block, ck))
        pos += len(index_block) + BLOCK_TRAILER_SIZE

        props = {name: value for name, value in r._props.items()
                 if name.startswith(RESERVED_PREFIX)}
        old_counts = {n: read_varint(v, 0, len(v))[0]
                      for n in _COUNTS for v in [props.get(n.encode(), b"\x00")]}
        new_counts = {
            "rocksdb.data.size": data_size,
            "rocksdb.index.size": len(index_block) + BLOCK_TRAILER_SIZE,
            "rocksdb.num.data.blocks": len(index),
            "rocksdb.num.entries": entries,
            "rocksdb.raw.key.size": old_counts["rocksdb.raw.key.size"] + key_bytes,
            "rocksdb.raw.value.size": old_counts["rocksdb.raw.value.size"] + value_bytes,
            "rocksdb.tail.start.offset": data_size,
        }
        for name, value in new_counts.items():
            if name.encode() in props:
                props[name.encode()] = encode_varint(value)
        props.update(_normalize_properties(properties))
        props_block = encode_block(sorted(props.items()))
        props_handle = (pos, len(props_block))
        pieces.append(block_with_trailer(props_block, ck))
        pos += len(props_block) + BLOCK_TRAILER_SIZE
        meta_block = encode_block([(PROPERTIES_BLOCK, encode_handle(*props_handle))])
        meta_handle = (pos, len(meta_block))
        pieces.append(block_with_trailer(meta_block, ck))
        pieces.append(encode_footer(r._footer, meta_handle, index_handle))

        with built_beside(path, sync) as tmp:
            with open(tmp, "wb") as f:
                f.writelines(pieces)
        return SSTInfo(size=sum(map(len, pieces)), count=entries, first_key=self.first_key(),
                       last_key=self.last_key())


def _chunks(keys: list[bytes], values: list[bytes], block_size: int):
    """The entries of an edited block, as one block unless the edits doubled it
    (then in pieces of about ``block_size`` bytes)."""
    if not keys:
        return  # every entry deleted: the block is dropped
    sizes = [len(k) + len(v) for k, v in zip(keys, values)]
    total = sum(sizes)
    if total <= 2 * block_size:
        yield keys, values
        return
    start = 0
    size = 0
    for i, n in enumerate(sizes):
        size += n
        if size >= block_size:
            yield keys[start:i + 1], values[start:i + 1]
            start, size = i + 1, 0
    if start < len(keys):
        yield keys[start:], values[start:]


def _compressed(raw: bytes, compression: str) -> tuple[bytes, int]:
    """(stored bytes, compression type) as RocksDB decides: compressed only when
    that saves at least an eighth."""
    if compression == "snappy":
        c = bytes(cramjam.snappy.compress_raw(raw))
        if len(c) < len(raw) - len(raw) // 8:
            return c, SNAPPY
    return raw, NO_COMPRESSION
