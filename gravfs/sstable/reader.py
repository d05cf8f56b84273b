"""Pure-Python reader of RocksDB block-based tables over an mmap.

Reads what RocksDB (any footer format_version 0..5), Pebble/lakeFS and our own
writer produce: legacy and current footers, metaindex and properties blocks,
binary-search and two-level (partitioned) indexes with user or internal index
keys and plain or delta-encoded values, restart arrays with or without a
data-block hash index, uncompressed/Snappy (and zlib/LZ4/ZSTD/bzip2) blocks,
and CRC32C/xxHash/xxHash64/XXH3 block checksums.

Lookups are seek-GE: bisect the index (decoded once into lists), then bisect
the decoded data block, which stays in a shared CLOCK block cache. A block's
checksum is verified when it is first read.

A mapped file is read as its reader needs it, not as the kernel guesses
(``MADV_RANDOM``, then ``MADV_WILLNEED`` of what comes next): its tail at
open (footer, metaindex, properties, index: one read), one data block per
lookup, and the file ahead of a scan once it goes past its second block. A
fault on a mapping otherwise reads around it as far as the device's
read-ahead (8 MiB on some virtual disks: a whole range for one lookup).

Anything that does not parse or check out raises ``CorruptDataError`` naming
the file and offset; a reader given ``recover`` first maps the sound copy it
returns and reads the block again.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence

from ..errors import CorruptDataError
from .block import (
    PAST_BLOCK,
    DataBlock,
    decode_data_block,
    decode_entries,
    decode_index_block,
    entries_end,
    entry_header,
    restart_offsets,
    scan_start,
    seek_data_block,
)
from .cache import DEFAULT_CACHE, BlockCache, BlockTable
from .format import (
    BLOCK_TRAILER_SIZE,
    FOOTER_SIZE,
    INDEX_BINARY_SEARCH,
    INDEX_HASH_SEARCH,
    INDEX_TWO_LEVEL,
    NO_CHECKSUM,
    NO_COMPRESSION,
    Footer,
    FormatError,
    block_checksum,
    decode_handle,
    decompress,
    parse_footer,
    read_varint,
)
from .properties import (
    BYTEWISE_COMPARATOR,
    LEGACY_PROPERTIES_BLOCK,
    PROPERTIES_BLOCK,
    RANGE_DEL_BLOCK,
    TableProperties,
    named,
    parse_table_properties,
    prop_name,
)

log = logging.getLogger(__name__)

# Called with the error of a block that failed its check; returns a mapping of
# a sound copy of the same file (the reader's ``recover``).
Recover = Callable[[CorruptDataError], "mmap.mmap | bytes"]


def map_file(path: str | os.PathLike, name: str | None = None) -> mmap.mmap:
    """Read-only mapping of a whole SST file (its own descriptor; the file may go)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # (no file object: a range's open is hot)
    try:
        if os.fstat(fd).st_size == 0:
            raise CorruptDataError("empty file is not an SSTable", path=name or os.fspath(path), offset=0)
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


class _Index:
    """A decoded index block: separator user keys and the handles they bound."""

    __slots__ = ("keys", "offsets", "sizes")

    def __init__(self, keys: list[bytes], offsets: list[int], sizes: list[int]):
        self.keys = keys
        self.offsets = offsets
        self.sizes = sizes

    def decoded(self) -> _Index:
        return self


LAZY_FINDS = 12  # lookups a lazy index answers from its raw block before it is decoded
# Read at open: the footer, metaindex, properties and index of a table of up to ~2 MiB
# of 4 KiB blocks; a bigger table's index is asked for next, in one more read.
TAIL_READ = 16 << 10
# The block a seek reaches when it starts to read ahead: a lookup whose key sorts past
# its block's last entry reads one block more, a scan goes on. It then asks for
# SCAN_AHEAD bytes at a time (a gravfs range whole; a lakeFS one, up to 20 MiB, in
# pieces), the next piece when it is halfway through the last.
SCAN_BLOCKS = 2
SCAN_AHEAD = 2 << 20
_RANDOM, _WILLNEED = getattr(mmap, "MADV_RANDOM", None), getattr(mmap, "MADV_WILLNEED", None)
# The last data block a scan decoded outside the block cache, as one tuple (blocks
# dict of its table, offset, block), replaced whole so a thread reads it whole: the
# listings of a lake's small directories each start with a seek, a few of them into
# one block, which was decoded again for each.
_last_scanned: list = [(None, -1, None)]


class _LazyIndex(_Index):
    """An index block kept raw until it has served ``LAZY_FINDS`` lookups.

    Why: decoding a range's index (~140 entries) was most of the CPU of
    opening it, and a cold random lookup opens a range to read one block of
    it. A lookup binary-searches the block's restart points instead, which
    touches a few entries. ``keys`` is None until decoded; scans, seeks and
    patches call :meth:`decoded`. Only for plain (not delta-encoded) handles,
    whose every entry carries its own.
    """

    __slots__ = ("_raw", "_strip", "_limit", "_restarts", "_offsets", "_finds")

    def __init__(self, raw: bytes, key_is_user: bool):
        super().__init__(None, None, None)
        self._raw = raw
        self._strip = 0 if key_is_user else 8
        self._limit = entries_end(raw)
        # restart offsets follow the entries (none to search in an empty block)
        self._restarts = (len(raw) - 4 - self._limit) // 4 if self._limit else 0
        self._offsets: Sequence[int] | None = None  # unpacked at the first find
        self._finds = 0

    def decoded(self) -> _Index:
        if self.keys is None:
            keys, offsets, sizes = decode_index_block(self._raw, not self._strip, False)
            self.offsets, self.sizes = offsets, sizes
            self.keys = keys  # last: a reader that sees keys sees the rest
        return self

    def _entry(self, p: int, prev: bytes) -> tuple[bytes, int, int, int]:
        """(stored key, block offset, block size, next entry) of the entry at ``p``."""
        raw, limit = self._raw, self._limit
        shared, non_shared, vlen, q = entry_header(raw, p, limit)
        end = q + non_shared + vlen
        if end > limit or shared > len(prev):
            raise FormatError("index entry overruns its block or shares more than the previous key", p)
        key = prev[:shared] + raw[q:q + non_shared] if shared else raw[q:q + non_shared]
        if len(key) < self._strip:
            raise FormatError("index key shorter than its 8-byte trailer", p)
        off, h = read_varint(raw, q + non_shared, end)
        size, _ = read_varint(raw, h, end)
        return key, off, size, end

    def find(self, key: bytes) -> tuple[int, int] | None:
        """Handle of the first block whose separator is >= ``key`` (None: past the last)."""
        if self.keys is not None or self._finds >= LAZY_FINDS:
            idx = self.decoded()
            i = bisect_left(idx.keys, key)
            return None if i == len(idx.keys) else (idx.offsets[i], idx.sizes[i])
        self._finds += 1
        raw, limit, strip = self._raw, self._limit, self._strip
        offsets = self._offsets
        if offsets is None:  # (two threads may both unpack: the same offsets)
            offsets = self._offsets = restart_offsets(raw, limit, self._restarts)
        p = scan_start(raw, limit, offsets, key, strip)
        prev = b""
        while p < limit:
            prev, off, size, p = self._entry(p, prev)
            if (prev[:-strip] if strip else prev) >= key:
                return off, size
        return None


_STATE_FIELDS = (
    "_footer", "_data_end", "_format_version", "_checksum_type", "_meta", "_props",
    "_table_props", "_table", "_blocks", "_kv", "_key_is_user",
    "_value_delta", "_top", "_two_level", "_partitions", "_cache", "_size",
)


class TableState:
    """What a reader parsed from a table, independent of the open file.

    Footer, properties, decoded index (and index partitions as they are
    read) and the table's decoded blocks in the block cache. For an
    immutable, content-addressed file this can outlive the reader and be
    handed to a new reader of the same file (``SSTReader(path, state=...)``),
    which then opens without parsing anything and finds its blocks still
    cached. The blocks leave the cache when the state is released or
    garbage-collected.
    """

    __slots__ = _STATE_FIELDS + ("_release", "__weakref__")

    def __init__(self, reader: "SSTReader"):
        for f in _STATE_FIELDS:
            setattr(self, f, getattr(reader, f))
        self._release = weakref.finalize(self, self._cache.release, self._table)

    @property
    def kv(self) -> dict[bytes, bytes]:
        """Key -> value map over the table's cached blocks (empty if keys may repeat)."""
        return self._kv

    @property
    def size(self) -> int:
        return self._size

    def release(self) -> None:
        """Drop the table's blocks from the cache (idempotent)."""
        self._release()


class SSTReader:
    """Read-only view of one SSTable.

    ``source`` is a path (opened and mmap'd read-only, closed by :meth:`close`),
    or a bytes-like object / mmap the caller owns. ``name`` is used in error
    messages (default: the path). ``cache`` is the block cache to use (default:
    the process-wide one). ``state`` is the :class:`TableState` of an earlier
    reader of the same file (see :meth:`share_state`): nothing is parsed again
    and its cache is used. ``recover`` (path sources only): called once, when a
    block fails its checksum, for a mapping of a sound copy of the same file,
    which replaces the reader's (a local copy damaged or torn by a crash). Safe
    for concurrent readers at GIL level.
    """

    def __init__(
        self,
        source: str | os.PathLike | bytes | bytearray | memoryview | mmap.mmap,
        name: str | None = None,
        verify_checksums: bool = True,
        *,
        cache: BlockCache | None = None,
        state: TableState | None = None,
        recover: Recover | None = None,
    ):
        self._closed = True
        self._state: TableState | None = None
        self._owns_state = False
        self._mmap: mmap.mmap | None = None
        self._copy_slices = False
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._table: BlockTable | None = None
        self._blocks: dict[int, DataBlock] = {}
        self._kv: dict[bytes, bytes] = {}
        self._probed: set[int] = set()  # blocks a lookup searched raw (_get_in_block)
        self._recover: Recover | None = None
        # the mapping from here to its end has been asked for (_need); 0: all of it
        self._asked_from = 0
        self.verify_checksums = verify_checksums
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            self.name = name if name is not None else path
            self._mmap = map_file(path, self.name)
            self._buf = self._mmap
            if _RANDOM is not None and _WILLNEED is not None:
                try:
                    self._mmap.madvise(_RANDOM)
                    self._asked_from = len(self._mmap)
                except OSError:  # advice refused: the kernel's read-around
                    pass
            if recover is not None:
                self._recover = recover
                # one thread swaps the mapping; the others wait, then read the new one
                self._recover_lock = threading.Lock()
        else:
            self.name = name if name is not None else f"<{type(source).__name__}>"
            if isinstance(source, mmap.mmap):
                self._buf = source
            elif isinstance(source, bytes):
                self._buf = source
            elif isinstance(source, bytearray):
                self._buf = bytes(source)
            elif isinstance(source, memoryview):
                self._buf = source.cast("B") if source.format != "B" else source
                self._copy_slices = True
            else:
                raise TypeError(f"unsupported SSTable source {type(source).__name__}")
        self._size = len(self._buf)
        self._closed = False
        if state is not None and state._size == self._size:
            for f in _STATE_FIELDS:
                setattr(self, f, getattr(state, f))
            self._state = state
            return
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        self._state = TableState(self)
        self._owns_state = True

    def share_state(self) -> TableState:
        """This reader's parsed state, to open the same file again cheaply.

        The caller takes it over: closing this reader no longer drops the
        table's blocks from the cache; releasing (or dropping) the state does.
        """
        self._owns_state = False
        return self._state

    # ------------------------------------------------------------ opening

    def _slice(self, start: int, end: int) -> bytes:
        if self._copy_slices:
            return bytes(self._buf[start:end])
        return self._buf[start:end]

    def _need(self, start: int, end: int) -> None:
        """Ask the kernel to read ``[start, end)`` of the mapping, in one request, unless
        asked before (the region up to the end is remembered; single blocks are not)."""
        asked = self._asked_from
        if start >= asked:
            return
        start -= start % mmap.PAGESIZE
        try:
            self._mmap.madvise(_WILLNEED, start, min(end, asked) - start)
        except (OSError, ValueError, AttributeError):  # unmapped meanwhile, or advice refused
            return
        if end >= asked:
            self._asked_from = start

    def prefetch(self) -> None:
        """Ask for the whole file at once: the caller is about to read most of it
        (a scan, a copy of its blocks), which would otherwise fault in page by page."""
        self._need(0, self._size)

    def _corrupt(self, message: str, offset: int | None) -> CorruptDataError:
        return CorruptDataError(message, path=self.name, offset=offset)

    def _open(self) -> None:
        size = self._size
        self._need(max(0, size - TAIL_READ), size)
        tail = self._slice(max(0, size - FOOTER_SIZE), size)
        try:
            footer = parse_footer(tail, size)
        except FormatError as e:
            raise self._corrupt(str(e), e.offset) from None
        self._footer: Footer = footer
        self._data_end = footer.offset
        # the meta blocks (properties, metaindex) and the index end the table data
        self._need(min(footer.metaindex_offset, footer.index_offset), size)
        self._format_version = footer.format_version
        self._checksum_type = footer.checksum_type

        meta_raw = self._read_block(footer.metaindex_offset, footer.metaindex_size, "metaindex")
        self._meta: dict[bytes, tuple[int, int]] = {}
        try:
            names, values = decode_entries(meta_raw)
            for n, v in zip(names, values):
                off, sz, _ = decode_handle(v, 0, len(v))
                self._meta[n] = (off, sz)
        except FormatError as e:
            raise self._corrupt(f"metaindex block: {e}", footer.metaindex_offset) from None

        self._props: dict[bytes, bytes] = {}  # stored names (see properties.named)
        handle = self._meta.get(PROPERTIES_BLOCK) or self._meta.get(LEGACY_PROPERTIES_BLOCK)
        if handle is not None:
            raw = self._read_block(handle[0], handle[1], "properties")
            try:
                names, values = decode_entries(raw)
            except FormatError as e:
                raise self._corrupt(f"properties block: {e}", handle[0]) from None
            self._props = dict(zip(names, values))
        try:
            tp = parse_table_properties(self._props, footer.format_version, footer.checksum_type)
        except FormatError as e:
            raise self._corrupt(f"properties block: {e}", handle[0] if handle else None) from None
        self._table_props = tp

        if tp.comparator is not None and tp.comparator != BYTEWISE_COMPARATOR:
            raise self._corrupt(f"unsupported comparator {tp.comparator!r}", handle[0] if handle else None)
        if tp.index_type not in (INDEX_BINARY_SEARCH, INDEX_HASH_SEARCH, INDEX_TWO_LEVEL):
            raise self._corrupt(f"unsupported index type {tp.index_type}", handle[0] if handle else None)
        self._check_no_range_deletions()

        # Tables built by SstFileWriter (RocksDB or Pebble) hold each user key
        # at most once; without deletions or merge operands every entry of a
        # loaded block is then the final answer for its key, so loaded blocks
        # are also published in a key -> value map that serves warm lookups
        # with one hash probe.
        unique = (
            b"rocksdb.external_sst_file.version" in self._props
            and tp.num_deletions == 0
            and not tp.num_merge_operands
        )
        self._table = BlockTable(key_map=unique)
        self._blocks = self._table.blocks
        self._kv = self._table.kv if unique else {}

        self._key_is_user = tp.index_key_is_user_key
        self._value_delta = tp.index_value_is_delta_encoded
        self._two_level = tp.index_type == INDEX_TWO_LEVEL
        self._top = self._read_index(footer.index_offset, footer.index_size,
                                     lazy=not (self._two_level or self._value_delta))
        self._partitions: dict[int, _Index] = {}

    def _check_no_range_deletions(self) -> None:
        # Range tombstones would hide keys; ignoring them would return wrong data.
        n = self._table_props.num_range_deletions
        handle = self._meta.get(RANGE_DEL_BLOCK)
        if n is None and handle is not None:
            raw = self._read_block(handle[0], handle[1], "range deletion")
            try:
                n = len(decode_entries(raw)[0])
            except FormatError as e:
                raise self._corrupt(f"range deletion block: {e}", handle[0]) from None
        if n:
            raise self._corrupt(f"SSTables with range deletions ({n}) are not supported", None)

    def _check_block(self, offset: int, size: int, what: str, verify: bool = True) -> bytes:
        """The stored bytes of the block at ``offset`` with its trailer, checksum-verified."""
        end = offset + size + BLOCK_TRAILER_SIZE
        if end > self._data_end:
            raise self._corrupt(
                f"{what} block (offset {offset}, size {size}) extends past the end of the table data "
                f"({self._data_end} bytes; file truncated or bad handle)",
                offset,
            )
        buf = self._buf
        if offset < self._asked_from:
            self._need(offset, end)
        raw = bytes(buf[offset:end]) if self._copy_slices else buf[offset:end]
        if verify and self._checksum_type != NO_CHECKSUM:
            stored = int.from_bytes(raw[size + 1 :], "little")
            actual = block_checksum(self._checksum_type, raw[: size + 1])
            if stored != actual:
                err = self._corrupt(
                    f"{what} block checksum mismatch (stored {stored:#010x}, computed {actual:#010x}, size {size})",
                    offset,
                )
                if self._recovered(buf, err):
                    return self._check_block(offset, size, what, verify)
                raise err
        return raw

    def _recovered(self, seen: object, err: CorruptDataError) -> bool:
        """Whether a sound copy now replaces ``seen``, the mapping a block failed in.

        The table is immutable, so everything parsed from checked blocks of the
        old copy (index, decoded blocks) holds for the new one. A failure of
        ``recover`` (the store's copy is bad too, or the store is out of reach)
        propagates and leaves the reader as it was.
        """
        if self._recover is None:  # never had one, or has used it
            return self._buf is not seen
        with self._recover_lock:
            if self._buf is not seen:
                return True  # another thread has swapped it meanwhile
            if self._recover is None or self._closed:
                return False
            log.info("%s; reading a sound copy", err)
            buf = self._recover(err)
            if len(buf) != self._size:
                raise self._corrupt(f"the copy fetched again has {len(buf)} bytes, not {self._size}", None)
            # the old mapping goes with its last slice: another thread may be reading it
            self._mmap = buf if isinstance(buf, mmap.mmap) else None
            self._asked_from = 0  # a fresh copy, read around as the kernel sees fit
            self._buf = buf
            self._recover = None
            return True

    def _read_block(self, offset: int, size: int, what: str, verify: bool | None = None) -> bytes:
        """The uncompressed contents of the block at ``offset``, checksum-verified."""
        raw = self._check_block(offset, size, what,
                                self.verify_checksums if verify is None else verify)
        ctype = raw[size]
        if ctype == NO_COMPRESSION:
            return raw[:size]
        try:
            return decompress(ctype, raw[:size], self._format_version)
        except FormatError as e:
            raise self._corrupt(f"{what} block: {e}", offset) from None

    def _read_index(self, offset: int, size: int, lazy: bool = False) -> _Index:
        raw = self._read_block(offset, size, "index")
        try:
            if lazy and len(raw) >= 4 and not raw[-1] & 0x80:  # (high bit: a hash index)
                return _LazyIndex(raw, self._key_is_user)
            return _Index(*decode_index_block(raw, self._key_is_user, self._value_delta))
        except FormatError as e:
            raise self._corrupt(f"index block: {e} (at byte {e.offset} of the block)", offset) from None

    def _index(self) -> _Index:
        """The top-level index, decoded (the only level of a single-level table)."""
        top = self._top
        if top.keys is None:
            try:
                top.decoded()
            except FormatError as e:
                raise self._corrupt(f"index block: {e} (at byte {e.offset} of the block)",
                                    self._footer.index_offset) from None
        return top

    # the single level's lists, for the table patcher and tests
    @property
    def _index_keys(self) -> list[bytes]:
        return self._index().keys

    @property
    def _index_offsets(self) -> list[int]:
        return self._index().offsets

    @property
    def _index_sizes(self) -> list[int]:
        return self._index().sizes

    def _partition(self, t: int) -> _Index:
        part = self._partitions.get(t)
        if part is None:
            part = self._read_index(self._top.offsets[t], self._top.sizes[t])
            self._partitions[t] = part
        return part

    def _load(self, offset: int, size: int, fill_cache: bool = True) -> DataBlock:
        raw = self._read_block(offset, size, "data")
        try:
            blk = decode_data_block(raw)
        except FormatError as e:
            raise self._corrupt(f"data block: {e} (at byte {e.offset} of the block)", offset) from None
        if fill_cache and not self._closed:
            self._cache.admit(self._table, offset, blk)
        return blk

    def _block(self, offset: int, size: int, fill_cache: bool = True) -> DataBlock:
        blk = self._blocks.get(offset)
        if blk is None:
            if fill_cache:
                return self._load(offset, size)
            blocks, at, blk = _last_scanned[0]
            if blocks is not self._blocks or at != offset:
                blk = self._load(offset, size, False)
                _last_scanned[0] = (self._blocks, offset, blk)
            return blk
        blk.ref = True
        return blk

    # ------------------------------------------------------------ metadata

    @property
    def properties(self) -> dict[str, bytes]:
        """Every entry of the properties block, values as stored."""
        return named(self._props)

    @property
    def user_properties(self) -> dict[str, bytes]:
        """Properties whose names do not start with ``rocksdb.``."""
        return named(self._props, user_only=True)

    @property
    def table_properties(self) -> TableProperties:
        return self._table_props

    @property
    def num_entries(self) -> int:
        """Entries in the table as recorded in its properties (counted if absent)."""
        n = self._table_props.num_entries
        if n is None:
            n = sum(len(self._block(o, s, False).keys) for o, s in self._handles_from(b""))
        return n

    @property
    def format_version(self) -> int:
        return self._format_version

    @property
    def size(self) -> int:
        return self._size

    # ------------------------------------------------------------ lookups

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"SSTReader for {self.name} is closed")

    def get(self, key: bytes) -> bytes | None:
        """The value stored for ``key``, or None."""
        v = self._kv.get(key)
        if v is not None:
            return v
        if self._closed:
            self._check_open()
        if self._two_level:
            return self._get_two_level(key)
        top = self._top
        ikeys = top.keys
        if ikeys is None:
            handle = self._raw_find(key)
            if handle is None:
                return None
            off, size = handle
        else:
            i = bisect_left(ikeys, key)
            if i == len(ikeys):
                return None
            off, size = top.offsets[i], top.sizes[i]
        return self._get_in_block(off, size, key)

    def _raw_find(self, key: bytes) -> tuple[int, int] | None:
        """The lazy top index's handle for ``key`` (see _LazyIndex.find), damage reported."""
        try:
            return self._top.find(key)
        except FormatError as e:
            raise self._corrupt(f"index block: {e} (at byte {e.offset} of the block)",
                                self._footer.index_offset) from None

    def _get_two_level(self, key: bytes) -> bytes | None:
        top = self._top
        t = bisect_left(top.keys, key)
        if t == len(top.keys):
            return None
        part = self._partitions.get(t) or self._partition(t)
        i = bisect_left(part.keys, key)
        if i == len(part.keys):
            return self._get_slow(key)
        return self._get_in_block(part.offsets[i], part.sizes[i], key)

    def _get_in_block(self, off: int, size: int, key: bytes) -> bytes | None:
        """``key``'s value in the block at ``off`` (its separator chose it).

        The first lookup in a block that no cache holds searches the raw block
        (seek_data_block); the second decodes and caches it: a cold random lookup
        reads a block once, and decoding it whole costs more than the search."""
        blk = self._blocks.get(off)
        if blk is None:
            if off not in self._probed:
                self._probed.add(off)
                raw = self._read_block(off, size, "data")
                try:
                    v = seek_data_block(raw, key)
                except FormatError as e:
                    raise self._corrupt(f"data block: {e} (at byte {e.offset} of the block)",
                                        off) from None
                # past the block (a shortened separator): the next block's first
                # lookup caches nothing either
                return self._get_slow(key, False) if v is PAST_BLOCK else v
            blk = self._load(off, size)
        else:
            blk.ref = True
        keys = blk.keys
        j = bisect_left(keys, key)
        if j < len(keys):
            return blk.values[j] if keys[j] == key else None
        return self._get_slow(key)

    def _get_slow(self, key: bytes, fill_cache: bool = True) -> bytes | None:
        # The key sorts after every entry of the block its separator chose: the
        # answer, if any, is the first live entry of a following block.
        for k, v in self._seek(key, fill_cache):
            return v if k == key else None
        return None

    def _handles_from(self, key: bytes) -> Iterator[tuple[int, int]]:
        """Handles of the data blocks from the one that may hold ``key`` onwards."""
        if not self._two_level:
            start = 0
            if self._top.keys is None:  # a raw index: the first block without decoding it
                handle = self._raw_find(key)
                if handle is None:
                    return
                yield handle  # (a seek often stops in its first block: a lookup's probe)
                start = 1
            index = self._index()
            offs, sizes = index.offsets, index.sizes
            for i in range(bisect_left(index.keys, key) + start, len(offs)):
                yield offs[i], sizes[i]
            return
        top = self._top
        t = bisect_left(top.keys, key)
        first = True
        for t in range(t, len(top.keys)):
            part = self._partition(t)
            start = bisect_left(part.keys, key) if first else 0
            first = False
            offs, sizes = part.offsets, part.sizes
            for i in range(start, len(offs)):
                yield offs[i], sizes[i]

    def _handles_reversed(self) -> Iterator[tuple[int, int]]:
        if not self._two_level:
            index = self._index()
            yield from zip(reversed(index.offsets), reversed(index.sizes))
            return
        for t in reversed(range(len(self._top.keys))):
            part = self._partition(t)
            yield from zip(reversed(part.offsets), reversed(part.sizes))

    @property
    def single_version(self) -> bool:
        """Each user key at most once and no deletions (SstFileWriter output): every
        data block then holds final answers of its own, whatever its neighbours hold."""
        return self._table is not None and self._table.kv is not None

    def block_images(self) -> list[tuple[tuple[int, int], bytes]]:
        """(handle, stored bytes with trailer) of every data block, for comparing
        blocks of two tables byte for byte; a handle past the table data is left out
        (reading it raises the usual error). Each image is checksum-checked: two
        copies torn alike must not pass for equal blocks."""
        self._check_open()
        end = self._data_end
        verify = self.verify_checksums
        self.prefetch()
        return [((off, size), self._check_block(off, size, "data", verify))
                for off, size in self._handles_from(b"") if off + size + BLOCK_TRAILER_SIZE <= end]

    def block_handles(self) -> list[tuple[int, int]]:
        """(offset, size) of every data block in key order (for tools and tests)."""
        self._check_open()
        return list(self._handles_from(b""))

    def seek(self, key: bytes = b"", *, fill_cache: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Iterate (key, value) in key order from the first key >= ``key``.

        Lazy: blocks are read as the iteration reaches them. ``fill_cache=False``
        keeps a long scan from evicting hot blocks.
        """
        self._check_open()
        return self._seek(key, fill_cache)

    def _seek(self, key: bytes, fill_cache: bool) -> Iterator[tuple[bytes, bytes]]:
        prev = None  # last user key seen: later entries with it are older versions
        first = True
        ahead_at = 0  # where the scan asks for its next SCAN_AHEAD bytes
        for nth, (off, size) in enumerate(self._handles_from(key)):
            if nth >= SCAN_BLOCKS and off >= ahead_at and off < self._asked_from:
                self._need(off, min(self._size, off + SCAN_AHEAD))
                ahead_at = off + SCAN_AHEAD // 2
            blk = self._block(off, size, fill_cache)
            keys = blk.keys
            values = blk.values
            j = bisect_left(keys, key) if first else 0
            first = False
            n = len(keys)
            if j >= n:
                continue
            if blk.clean and keys[j] != prev:
                if j:
                    yield from zip(keys[j:], values[j:])
                else:
                    yield from zip(keys, values)
            else:
                for idx in range(j, n):
                    k = keys[idx]
                    if k == prev:
                        continue
                    prev = k
                    v = values[idx]
                    if v is not None:
                        yield k, v
            prev = keys[-1]

    def items_lists(self, *, fill_cache: bool = True, handles: list[tuple[int, int]] | None = None
                    ) -> tuple[list[bytes], list[bytes]]:
        """Every (key, value) of the table as two lists: what iterating gives, built
        a block at a time (a whole-table scan without a generator step per entry).
        ``handles``: only these data blocks (see :func:`unshared_items`)."""
        self._check_open()
        keys: list[bytes] = []
        values: list[bytes] = []
        prev = None
        self.prefetch()
        for off, size in (self._handles_from(b"") if handles is None else handles):
            blk = self._block(off, size, fill_cache)
            bk = blk.keys
            if not bk:
                continue
            if blk.clean and bk[0] != prev:
                keys += bk
                values += blk.values
            else:
                for k, v in zip(bk, blk.values):
                    if k == prev:
                        continue
                    prev = k
                    if v is not None:
                        keys.append(k)
                        values.append(v)
            prev = bk[-1]
        return keys, values

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self.seek(b"")

    def first_key(self) -> bytes | None:
        """Smallest key with a value, or None if the table holds none."""
        for k, _ in self.seek(b""):
            return k
        return None

    def last_key(self) -> bytes | None:
        """Largest key with a value, or None if the table holds none."""
        self._check_open()
        for off, size in self._handles_reversed():
            prev = None
            for k in reversed(self._block(off, size).keys):
                if k == prev:
                    continue
                prev = k
                if self.get(k) is not None:  # resolves versions and deletions
                    return k
        return None

    # ------------------------------------------------------------ integrity

    def verify(self, decompress: bool = True) -> None:
        """Check the checksum of every block (and, with ``decompress``, that each data
        block decompresses); raises CorruptDataError at the first bad one. Without
        it a data block that passes its checksum but does not decompress (a
        writer's bug, not damage) is reported when it is read, and a verified
        fetch costs a fifth of the time."""
        self._check_open()
        self.prefetch()
        f = self._footer
        self._read_block(f.metaindex_offset, f.metaindex_size, "metaindex", verify=True)
        for name, (off, size) in sorted(self._meta.items(), key=lambda kv: kv[1]):
            self._read_block(off, size, f"meta ({prop_name(name)})", verify=True)
        self._read_block(f.index_offset, f.index_size, "index", verify=True)
        if self._two_level:
            indexes = []
            for t in range(len(self._top.keys)):
                o, s = self._top.offsets[t], self._top.sizes[t]
                self._read_block(o, s, "index partition", verify=True)
                indexes.append(self._partition(t))
        else:
            indexes = [self._index()]
        count = 0
        for index in indexes:
            for off, size in zip(index.offsets, index.sizes):
                if decompress:
                    self._read_block(off, size, "data", verify=True)
                else:
                    self._check_block(off, size, "data")
                count += 1
        expected = self._table_props.num_data_blocks
        if expected is not None and expected != count:
            raise self._corrupt(f"index lists {count} data blocks, properties say {expected}", f.index_offset)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self._closed and self._mmap is None:
            return
        self._closed = True
        if self._owns_state and self._state is not None:
            self._state.release()  # drops our blocks from the cache
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a caller still holds a view; let GC close it
                log.debug("mmap of %s still exported; leaving it to the GC", self.name)
            self._mmap = None

    def __enter__(self) -> SSTReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._size} bytes"
        return f"<SSTReader {self.name} ({state})>"


def unshared_items(a: SSTReader, b: SSTReader) -> tuple[tuple[list[bytes], list[bytes]],
                                                         tuple[list[bytes], list[bytes]]]:
    """(keys, values) of ``a`` and of ``b`` outside the data blocks both hold byte for byte.

    Why: two versions of a range that differ in a few records, written by the
    same SstFileWriter options, share every block before the first difference
    (and after it, when the changed values kept their lengths). Equal blocks
    hold equal entries, so a diff or a merge can drop them from both sides
    unread: the order-merge of what is left gives the same differences. Only
    for single-version tables (see :attr:`SSTReader.single_version`); others
    are read whole. A dropped block is checksum-checked but not decoded.
    """
    if not (a.single_version and b.single_version):
        return a.items_lists(fill_cache=False), b.items_lists(fill_cache=False)
    ia, ib = a.block_images(), b.block_images()
    shared = {img for _, img in ia}.intersection([img for _, img in ib])
    if not shared:
        return a.items_lists(fill_cache=False), b.items_lists(fill_cache=False)
    return (a.items_lists(fill_cache=False, handles=[h for h, img in ia if img not in shared]),
            b.items_lists(fill_cache=False, handles=[h for h, img in ib if img not in shared]))
