"""The properties block: raw name -> bytes map, and the rocksdb.* values we use.

RocksDB stores its own numeric properties as varint64, a few collector-written
ones as fixed-width integers, and everything else (including the user
properties lakeFS and gravfs add, e.g. ``type``, ``min_key``) as raw bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .format import FormatError, read_varint

PROPERTIES_BLOCK = b"rocksdb.properties"
LEGACY_PROPERTIES_BLOCK = b"rocksdb.stats"
RANGE_DEL_BLOCK = b"rocksdb.range_del"
RESERVED_PREFIX = "rocksdb."

BYTEWISE_COMPARATOR = b"leveldb.BytewiseComparator"

_VARINT_PROPS = {
    "rocksdb.num.entries": "num_entries",
    "rocksdb.num.data.blocks": "num_data_blocks",
    "rocksdb.data.size": "data_size",
    "rocksdb.index.size": "index_size",
    "rocksdb.index.partitions": "index_partitions",
    "rocksdb.top-level.index.size": "top_level_index_size",
    "rocksdb.index.key.is.user.key": "index_key_is_user_key",
    "rocksdb.index.value.is.delta.encoded": "index_value_is_delta_encoded",
    "rocksdb.raw.key.size": "raw_key_size",
    "rocksdb.raw.value.size": "raw_value_size",
    "rocksdb.deleted.keys": "num_deletions",
    "rocksdb.merge.operands": "num_merge_operands",
    "rocksdb.num.range-deletions": "num_range_deletions",
    "rocksdb.format.version": "table_format_version",
}


@dataclass(frozen=True)
class TableProperties:
    """Parsed subset of the properties block plus footer facts."""

    format_version: int
    checksum_type: int
    index_type: int = 0
    index_key_is_user_key: bool = False
    index_value_is_delta_encoded: bool = False
    num_entries: int | None = None
    num_data_blocks: int | None = None
    data_size: int | None = None
    index_size: int | None = None
    index_partitions: int | None = None
    top_level_index_size: int | None = None
    raw_key_size: int | None = None
    raw_value_size: int | None = None
    num_deletions: int | None = None
    num_merge_operands: int | None = None
    num_range_deletions: int | None = None
    table_format_version: int | None = None
    comparator: bytes | None = None
    compression: bytes | None = None


def parse_table_properties(props: dict[str, bytes], format_version: int, checksum_type: int) -> TableProperties:
    fields: dict[str, object] = {}
    for name, attr in _VARINT_PROPS.items():
        raw = props.get(name)
        if raw is None:
            continue
        value, end = read_varint(raw, 0, len(raw))
        if end != len(raw):
            raise FormatError(f"property {name} is not a single varint")
        fields[attr] = value
    for flag in ("index_key_is_user_key", "index_value_is_delta_encoded"):
        if flag in fields:
            fields[flag] = bool(fields[flag])
    raw = props.get("rocksdb.block.based.table.index.type")
    if raw is not None:
        if len(raw) != 4:
            raise FormatError("property rocksdb.block.based.table.index.type is not a fixed32")
        fields["index_type"] = int.from_bytes(raw, "little")
    fields["comparator"] = props.get("rocksdb.comparator")
    fields["compression"] = props.get("rocksdb.compression")
    return TableProperties(format_version=format_version, checksum_type=checksum_type, **fields)


def prop_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")
