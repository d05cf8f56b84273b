"""The three lakeFS-written tables in ../shared/compat/lakefs, read in place."""

from __future__ import annotations

import os

import pytest

from gravfs.sstable import SSTReader
from tests.sstable.support import sst_dump_scan_hex

USER_PROPS = {
    "range.sst": {
        "type": b"ranges",
        "count": b"2",
        "estimated_size_bytes": b"287",
        "min_key": b"a/b/c/no",
        "max_key": b"a/b/c/yes",
    },
    "metarange.sst": {
        "type": b"metaranges",
        "count": b"1",
        "estimated_size_bytes": b"125",
        "min_key": b"a/b/c/yes",
        "max_key": b"a/b/c/yes",
    },
    "ok1.sst": {
        "type": b"ranges",
        "count": b"105",
        "estimated_size_bytes": b"10077",
        "min_key": bytes.fromhex("2B40B36CA8"),
        "max_key": b"xyzzy",
    },
}


def lakefs(compat_dir: str, name: str) -> str:
    return os.path.join(compat_dir, "lakefs", name)


def zigzag_field(buf: bytes, pos: int) -> tuple[bytes, int]:
    """One `zigzag-varint length | bytes` field of a lakeFS record value."""
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    length = (n >> 1) ^ -(n & 1)
    return buf[pos : pos + length], pos + length


@pytest.mark.parametrize("name", sorted(USER_PROPS))
def test_every_entry_matches_rocksdb(compat_dir, name):
    path = lakefs(compat_dir, name)
    expected = sst_dump_scan_hex(path)  # RocksDB's own reading of the file
    with SSTReader(path) as r:
        assert list(r) == expected
        for k, v in expected:
            assert r.get(k) == v
        assert r.num_entries == len(expected)
        assert r.first_key() == expected[0][0]
        assert r.last_key() == expected[-1][0]
        r.verify()


@pytest.mark.parametrize("name", sorted(USER_PROPS))
def test_user_properties(compat_dir, name):
    with SSTReader(lakefs(compat_dir, name)) as r:
        assert r.user_properties == USER_PROPS[name]
        props = r.properties
        assert props["rocksdb.comparator"] == b"leveldb.BytewiseComparator"
        assert props["rocksdb.block.based.table.index.type"] == b"\x00\x00\x00\x00"
        assert props["rocksdb.external_sst_file.version"] == b"\x02\x00\x00\x00"
        tp = r.table_properties
        assert tp.format_version == 2
        assert tp.checksum_type == 1  # CRC32C
        assert tp.index_key_is_user_key is False  # Pebble writes internal index keys
        assert tp.index_value_is_delta_encoded is False
        assert tp.num_entries == int(USER_PROPS[name]["count"])


def test_range(compat_dir):
    with SSTReader(lakefs(compat_dir, "range.sst")) as r:
        assert [k for k, _ in r] == [b"a/b/c/no", b"a/b/c/yes"]
        assert len(r.block_handles()) == 1
        for _, v in r:
            identity, pos = zigzag_field(v, 0)
            data, _ = zigzag_field(v, pos)
            assert len(identity) == 32  # SHA-256
            assert data  # protobuf Entry
        assert r.get(b"a/b/c/maybe") is None
        assert list(r.seek(b"a/b/c/o")) == [(b"a/b/c/yes", r.get(b"a/b/c/yes"))]


def test_metarange_points_at_range(compat_dir):
    with SSTReader(lakefs(compat_dir, "metarange.sst")) as r:
        ((key, value),) = list(r)
        assert key == b"a/b/c/yes"
        identity, pos = zigzag_field(value, 0)
        assert identity == b"a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
        range_data, _ = zigzag_field(value, pos)
        # RangeData field 1 (min_key, bytes) = "a/b/c/no"
        assert range_data[:2] == b"\x0a\x08" and range_data[2:10] == b"a/b/c/no"


def test_ok1_four_snappy_blocks(compat_dir):
    path = lakefs(compat_dir, "ok1.sst")
    raw = open(path, "rb").read()
    with SSTReader(path) as r:
        handles = r.block_handles()
        assert len(handles) == 4 == r.table_properties.num_data_blocks
        assert all(raw[off + size] == 1 for off, size in handles)  # Snappy trailer byte
        items = list(r)
        assert len(items) == 105
        assert items[0][0] == b"first" and items[-1][0] == b"xyzzy"
        assert r.first_key() == b"first" and r.last_key() == b"xyzzy"
        # seek-GE around the shortened internal-key separators lakeFS wrote
        keys = [k for k, _ in items]
        for sep in r._index_keys:
            i = next((i for i, k in enumerate(keys) if k >= sep), len(keys))
            assert [k for k, _ in r.seek(sep)] == keys[i:]
        assert r.get(b"zzz") is None and list(r.seek(b"zzz")) == []
        assert list(r.seek(b"")) == items


def test_compat_files_from_bytes(compat_dir):
    data = open(lakefs(compat_dir, "ok1.sst"), "rb").read()
    with SSTReader(data, name="ok1") as r:
        assert len(list(r)) == 105
