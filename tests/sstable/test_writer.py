"""write_sst: what it writes is accepted by RocksDB (sst_dump, Rdict) and by our reader,
with the caller's user properties."""

from __future__ import annotations

import os

import pytest

from gravfs.sstable import SSTInfo, SSTReader, write_sst
from tests.sstable.support import make_items, rocksdb_items, sst_dump, sst_dump_scan_hex

PROPS = {
    "type": b"ranges",
    "min_key": b"dir/file-0000000",
    "max_key": b"dir/file-0000999",
    "count": b"1000",
    "estimated_size_bytes": b"54321",
}


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_round_trip_with_properties(tmp_path, compression):
    items = make_items(1000)
    path = str(tmp_path / "r.sst")
    info = write_sst(path, items, PROPS, compression=compression)
    assert info == SSTInfo(size=os.path.getsize(path), count=1000, first_key=items[0][0], last_key=items[-1][0])
    assert os.listdir(tmp_path) == ["r.sst"]  # no temp file left behind
    with SSTReader(path) as r:
        assert r.user_properties == PROPS
        assert list(r) == items
        assert all(r.get(k) == v for k, v in items)
        tp = r.table_properties
        assert (tp.format_version, tp.checksum_type, tp.index_type) == (2, 1, 0)
        assert tp.compression == (b"Snappy" if compression == "snappy" else b"NoCompression")
        assert tp.num_entries == 1000
        raw = open(path, "rb").read()
        types = {raw[off + size] for off, size in r.block_handles()}
        assert types == ({1} if compression == "snappy" else {0})
        r.verify()
    assert rocksdb_items(path) == items  # RocksDB ingests and reads our rewritten table


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_sst_dump_accepts_and_shows_user_properties(tmp_path, compression):
    items = make_items(5000)
    path = str(tmp_path / "d.sst")
    write_sst(path, items, PROPS, compression=compression)
    verify = sst_dump(path, "--command=verify")
    assert verify.returncode == 0, verify.stderr
    assert "The file is ok" in verify.stdout
    assert "Corruption" not in verify.stdout + verify.stderr
    assert sst_dump_scan_hex(path) == items
    shown = sst_dump(path, "--show_properties")
    assert shown.returncode == 0, shown.stderr
    assert "Not able to read table properties" not in shown.stdout + shown.stderr
    assert "Corruption" not in shown.stdout + shown.stderr
    user_section = shown.stdout.split("Raw user collected properties", 1)[1]
    for name, value in PROPS.items():
        assert f"# {name}: 0x{value.hex().upper()}" in user_section
    assert "# entries: 5000" in shown.stdout
    assert "# rocksdb.block.based.table.index.type: 0x00000000" in user_section


def test_properties_block_sorted_and_rocksdb_entries_kept(tmp_path):
    path = str(tmp_path / "p.sst")
    write_sst(path, make_items(10), {"zz": b"last", "aa": b"first", "rocksdbx": b"not reserved"})
    plain = str(tmp_path / "plain.sst")
    write_sst(plain, make_items(10))
    with SSTReader(path) as r, SSTReader(plain) as p:
        names = list(r.properties)
        assert names == sorted(names, key=lambda n: n.encode())
        assert r.user_properties == {"zz": b"last", "aa": b"first", "rocksdbx": b"not reserved"}
        assert p.user_properties == {}
        rocks = {k: v for k, v in r.properties.items() if k.startswith("rocksdb.")}
        assert rocks.keys() == {k for k in p.properties if k.startswith("rocksdb.")}
        assert rocks["rocksdb.num.entries"] == p.properties["rocksdb.num.entries"]


def test_binary_property_values(tmp_path):
    path = str(tmp_path / "b.sst")
    props = {"min_key": bytes(range(256)), "empty": b"", "ünïcode": "ok".encode()}
    write_sst(path, [(b"k", b"v")], props)
    with SSTReader(path) as r:
        assert r.user_properties == props
    assert sst_dump(path, "--command=verify").returncode == 0


def test_block_size_controls_blocks(tmp_path):
    items = make_items(5000, value_size=60)
    small, big = str(tmp_path / "s.sst"), str(tmp_path / "b.sst")
    write_sst(small, items, compression="none", block_size=512)
    write_sst(big, items, compression="none", block_size=16384)
    with SSTReader(small) as s, SSTReader(big) as b:
        assert len(s.block_handles()) > 20 * len(b.block_handles())
        assert max(size for _, size in b.block_handles()) >= 16384 * 0.9  # block_size_deviation
        assert list(s) == list(b) == items


def test_accepts_generators_and_large_ranges(tmp_path):
    path = str(tmp_path / "g.sst")
    n = 200_000
    info = write_sst(path, ((b"k%09d" % i, b"v%d" % i) for i in range(n)), {"count": b"%d" % n})
    assert info.count == n and info.first_key == b"k000000000" and info.last_key == b"k%09d" % (n - 1)
    with SSTReader(path) as r:
        assert r.num_entries == n
        assert r.get(b"k000123456") == b"v123456"
        assert r.get(b"k000123456x") is None


@pytest.mark.parametrize(
    "items, message",
    [
        ([], "no items"),
        ([(b"b", b"1"), (b"a", b"2")], r"strictly ascending.*item 1 \(b'a'\)"),
        ([(b"a", b"1"), (b"a", b"2")], "without duplicates: item 1"),
        ([(b"a", b"1"), (b"c", b"2"), (b"b", b"3")], r"item 2 \(b'b'\)"),
    ],
)
def test_bad_input_raises_and_leaves_nothing(tmp_path, items, message):
    path = str(tmp_path / "bad.sst")
    with pytest.raises(ValueError, match=message):
        write_sst(path, items)
    assert os.listdir(tmp_path) == []


def test_bad_arguments(tmp_path):
    path = str(tmp_path / "x.sst")
    with pytest.raises(ValueError):
        write_sst(path, [(b"a", b"1")], compression="zstd")
    with pytest.raises(ValueError):
        write_sst(path, [(b"a", b"1")], block_size=0)
    with pytest.raises(ValueError, match="reserved"):
        write_sst(path, [(b"a", b"1")], {"rocksdb.num.entries": b"7"})
    with pytest.raises(TypeError):
        write_sst(path, [(b"a", b"1")], {"type": "ranges"})
    with pytest.raises(TypeError):
        write_sst(path, [("a", b"1")])
    with pytest.raises(TypeError):
        write_sst(path, [(b"a", b"1"), (b"b", "2")])
    assert os.listdir(tmp_path) == []


def test_failure_midway_keeps_old_file(tmp_path):
    path = str(tmp_path / "t.sst")
    write_sst(path, make_items(10))
    before = open(path, "rb").read()

    def items():
        yield from make_items(100)
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        write_sst(path, items())
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["t.sst"]
    # and a successful rewrite replaces it atomically
    write_sst(path, make_items(20), {"type": b"ranges"})
    with SSTReader(path) as r:
        assert r.num_entries == 20


def test_missing_directory_is_an_os_error(tmp_path):
    with pytest.raises(OSError):
        write_sst(str(tmp_path / "no" / "such" / "dir.sst"), [(b"a", b"1")])


def test_concurrent_writers_of_the_same_path(tmp_path):
    """Content-addressed names get written by several threads at once: every
    writer must produce the file whole, never a mix of two temp files."""
    import threading

    path = str(tmp_path / "same.sst")
    items = make_items(20000)
    errors = []

    def work():
        try:
            for _ in range(3):
                write_sst(path, items, PROPS)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert os.listdir(tmp_path) == ["same.sst"]
    with SSTReader(path) as r:
        r.verify()
        assert list(r) == items and r.user_properties == PROPS


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.dictionaries(st.binary(max_size=30), st.binary(max_size=300), min_size=1, max_size=400),
    props=st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda s: not s.startswith("rocksdb.")),
        st.binary(max_size=64),
        max_size=6,
    ),
    compression=st.sampled_from(["snappy", "none"]),
    block_size=st.sampled_from([128, 1024, 4096]),
    probes=st.lists(st.binary(max_size=31), max_size=30),
)
def test_hypothesis_write_then_read(tmp_path, entries, props, compression, block_size, probes):
    items = sorted(entries.items())
    path = str(tmp_path / "h.sst")
    info = write_sst(path, items, props, compression=compression, block_size=block_size)
    assert (info.count, info.first_key, info.last_key) == (len(items), items[0][0], items[-1][0])
    keys = [k for k, _ in items]
    with SSTReader(path) as r:
        assert r.user_properties == props
        assert list(r) == items
        for p in probes + keys[:: max(1, len(keys) // 15)]:
            assert r.get(p) == entries.get(p)
            i = next((i for i, k in enumerate(keys) if k >= p), len(keys))
            assert next(r.seek(p), None) == (items[i] if i < len(items) else None)
        r.verify()
