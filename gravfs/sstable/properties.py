"""The properties block: raw name -> bytes map, and the rocksdb.* values we use.

The map stays keyed by the stored names (bytes): opening a table decodes only
the values it uses, and names become text only for callers that list them.

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
RESERVED_PREFIX = b"rocksdb."

BYTEWISE_COMPARATOR = b"leveldb.BytewiseComparator"

_VARINT_PROPS = {
    b"rocksdb.num.entries": "num_entries",
    b"rocksdb.num.data.blocks": "num_data_blocks",
    b"rocksdb.data.size": "data_size",
    b"rocksdb.index.size": "index_size",
    b"rocksdb.index.partitions": "index_partitions",
    b"rocksdb.top-level.index.size": "top_level_index_size",
    b"rocksdb.index.key.is.user.key": "index_key_is_user_key",
    b"rocksdb.index.value.is.delta.encoded": "index_value_is_delta_encoded",
    b"rocksdb.raw.key.size": "raw_key_size",
    b"rocksdb.raw.value.size": "raw_value_size",
    b"rocksdb.deleted.keys": "num_deletions",
    b"rocksdb.merge.operands": "num_merge_operands",
    b"rocksdb.num.range-deletions": "num_range_deletions",
    b"rocksdb.format.version": "table_format_version",
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


def parse_table_properties(props: dict[bytes, bytes], format_version: int, checksum_type: int) -> TableProperties:
    fields: dict[str, object] = {}
    for name, attr in _VARINT_PROPS.items():
        raw = props.get(name)
        if raw is None:
            continue
        value, end = read_varint(raw, 0, len(raw))
        if end != len(raw):
            raise FormatError(f"property {prop_name(name)} is not a single varint")
        fields[attr] = value
    for flag in ("index_key_is_user_key", "index_value_is_delta_encoded"):
        if flag in fields:
            fields[flag] = bool(fields[flag])
    raw = props.get(b"rocksdb.block.based.table.index.type")
    if raw is not None:
        if len(raw) != 4:
            raise FormatError("property rocksdb.block.based.table.index.type is not a fixed32")
        fields["index_type"] = int.from_bytes(raw, "little")
    fields["comparator"] = props.get(b"rocksdb.comparator")
    fields["compression"] = props.get(b"rocksdb.compression")
    return TableProperties(format_version=format_version, checksum_type=checksum_type, **fields)


def prop_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def named(props: dict[bytes, bytes], user_only: bool = False) -> dict[str, bytes]:
    """The map with text names (``user_only``: without RocksDB's own, rocksdb.*)."""
    return {prop_name(n): v for n, v in props.items()
            if not (user_only and n.startswith(RESERVED_PREFIX))}
