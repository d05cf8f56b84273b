"""Metarange records of ranges, cached by RangeInfo.

Every commit writes a new metarange holding one record per range of the tree,
nearly all of them copied unchanged from the base tree.  A record (the lakeFS
value ``range id | RangeData``) and its valueRecordID are a pure function of
the RangeInfo, so they are kept here process-wide: writing the metarange of a
commit then costs a dict probe per copied range instead of a protobuf
encoding and three SHA-256.  Records read from a stored metarange are put in
as they are read, so the first commit on a freshly loaded tree is cheap too.
Bounded by clearing when full (entries are recomputed on demand).
"""

from __future__ import annotations

import hashlib
import threading

from gravfs.version.committed.messages import encode_range_data
from gravfs.version.committed.record import encode_value

try:  # CPython's built-in SHA-256 has less per-call overhead than OpenSSL's for short inputs
    from _sha256 import sha256 as _sha
except ImportError:  # pragma: no cover
    _sha = hashlib.sha256

MAX_ENTRIES = 1 << 17   # ~0.6 KiB each: enough for trees of ~100M entries with room to spare

_records: dict = {}
_lock = threading.Lock()


def record_digest(max_key: bytes, range_id: str) -> bytes:
    """Raw valueRecordID of the metarange record of a range."""
    return _sha(_sha(max_key).digest() + _sha(range_id.encode("ascii")).digest()).digest()


def _store(info, entry: tuple[bytes, bytes]) -> None:
    if len(_records) >= MAX_ENTRIES:
        with _lock:
            if len(_records) >= MAX_ENTRIES:
                _records.clear()
    _records[info] = entry


def meta_record(info) -> tuple[bytes, bytes]:
    """(encoded metarange value, raw valueRecordID) of the record of range ``info``."""
    e = _records.get(info)
    if e is None:
        value = encode_value(info.id.encode("ascii"), encode_range_data(
            info.min_key, info.max_key, info.estimated_size, info.count))
        e = (value, record_digest(info.max_key, info.id))
        _store(info, e)
    return e


def remember(info, value: bytes) -> None:
    """Record ``value`` as read from a stored metarange for range ``info``."""
    if info not in _records:
        _store(info, (bytes(value), record_digest(info.max_key, info.id)))


def clear() -> None:
    """Forget everything (tests and benchmarks)."""
    _records.clear()
