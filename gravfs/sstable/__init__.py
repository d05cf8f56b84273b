"""RocksDB block-based SSTables: rocksdict-backed writer, pure-Python mmap reader."""

from .cache import DEFAULT_CACHE, BlockCache
from .reader import SSTReader
from .writer import SSTInfo, write_sst

__all__ = ["write_sst", "SSTInfo", "SSTReader", "BlockCache", "DEFAULT_CACHE"]
