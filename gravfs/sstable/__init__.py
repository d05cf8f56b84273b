"""RocksDB block-based SSTables: rocksdict-backed writer, pure-Python mmap reader.

- ``write_sst(path, items, properties=None, compression="snappy", block_size=4096)
  -> SSTInfo(size, count, first_key, last_key)``: strictly ascending bytes keys,
  at least one item; format_version 2, CRC32C, Snappy or none; ``properties``
  (str -> bytes) become user properties visible to RocksDB/sst_dump/Pebble.
  Built in a temp file beside ``path`` and renamed into place.
- ``SSTReader(path | bytes | memoryview | mmap, name=None, verify_checksums=True,
  recover=None)``:
  ``get``, ``seek`` (seek-GE iterator), ``first_key``/``last_key``,
  ``properties``/``user_properties``/``table_properties``/``num_entries``,
  ``verify``, ``prefetch`` (ask for the whole file ahead of a copy), ``close``
  (also a context manager). A mapped file is read as lookups need it (its tail
  at open, one block per lookup, 2 MiB at a time ahead of a scan). Errors in the bytes raise
  ``gravfs.errors.CorruptDataError`` naming the file and offset, unless
  ``recover`` maps a sound copy (``map_file``) to read instead.
- ``unshared_items(a, b)``: the entries of two tables outside the data blocks they
  share byte for byte (what a diff must compare).
- Decoded blocks live in a process-wide ``BlockCache`` (``DEFAULT_CACHE``,
  a quarter of the memory the process may use by default (physical memory or
  a smaller cgroup limit), within [128 MiB, 16 GiB]: ~300 bytes per warm entry,
  so 6 GiB holds ~20M entries; resize with
  ``DEFAULT_CACHE.set_capacity``) or one passed as ``cache=``.

``scripts/bench_sstable.py`` measures write, lookup and scan rates.
"""

from .cache import DEFAULT_CACHE, BlockCache
from .reader import TAIL_READ, SSTReader, TableState, map_file, unshared_items
from .writer import SSTInfo, write_sst

__all__ = ["write_sst", "SSTInfo", "SSTReader", "TableState", "TAIL_READ", "map_file",
           "unshared_items", "BlockCache", "DEFAULT_CACHE"]
