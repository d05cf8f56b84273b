"""Damaged tables raise CorruptDataError naming the file and offset, never wrong data."""

from __future__ import annotations

import os
import shutil

import pytest

from gravfs.errors import CorruptDataError
from gravfs.sstable import BlockCache, SSTReader, write_sst
from gravfs.sstable.block import entry_header
from gravfs.sstable.format import encode_footer, parse_footer
from tests.sstable.support import make_items, rewrite_block, rocksdict_sst

PROPS = {"type": b"ranges", "count": b"300"}


@pytest.fixture
def table(tmp_path):
    def make(compression="snappy", n=300, block_size=1024):
        path = str(tmp_path / f"t-{compression}-{n}.sst")
        items = make_items(n)
        write_sst(path, items, PROPS, compression=compression, block_size=block_size)
        return path, items

    return make


def read_all(r: SSTReader, items) -> list:
    got = list(r)
    for k, _ in items:
        r.get(k)
    return got


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_flipped_byte_in_data_block(table, compression):
    path, items = table(compression)
    with SSTReader(path) as r:
        handles = r.block_handles()
    off, size = handles[2]
    data = bytearray(open(path, "rb").read())
    data[off + size // 2] ^= 0x40
    with open(path, "wb") as f:
        f.write(data)
    with SSTReader(path, cache=BlockCache()) as r:
        # keys in untouched blocks still read fine
        assert r.get(items[0][0]) == items[0][1]
        with pytest.raises(CorruptDataError) as e:
            list(r)
        assert e.value.path == path and e.value.offset == off
        assert "checksum mismatch" in str(e.value)
        assert str(e.value).startswith(f"{path} at offset {off}: ")
    with SSTReader(path, cache=BlockCache()) as r:
        with pytest.raises(CorruptDataError) as e:
            r.verify()  # finds it without any prior read
        assert e.value.offset == off
        victims = [k for k, _ in items if r._index_keys[2] >= k > r._index_keys[1]]
        with pytest.raises(CorruptDataError):
            r.get(victims[0])


def test_lakefs_file_damaged_names_file_and_offset(compat_dir, tmp_path):
    src = os.path.join(compat_dir, "lakefs", "ok1.sst")
    with SSTReader(src) as r:
        off, size = r.block_handles()[1]
    data = bytearray(open(src, "rb").read())
    data[off + 10] ^= 0xFF
    with SSTReader(bytes(data), name="ranges/ok1") as r:
        with pytest.raises(CorruptDataError, match=rf"^ranges/ok1 at offset {off}: data block checksum mismatch"):
            r.verify()


@pytest.mark.parametrize("cut", [1, 8, 52, 53, 54, 500, "half"])
def test_truncated(table, cut):
    path, _ = table()
    data = open(path, "rb").read()
    n = len(data) // 2 if cut == "half" else len(data) - cut
    with pytest.raises(CorruptDataError) as e:
        SSTReader(data[:n], name="trunc")
    assert e.value.path == "trunc"
    assert e.value.offset is not None and 0 <= e.value.offset <= n


def test_wrong_magic(table, tmp_path):
    path, _ = table()
    data = bytearray(open(path, "rb").read())
    data[-8:] = b"NOTMAGIC"
    bad = str(tmp_path / "bad.sst")
    with open(bad, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptDataError, match="bad table magic") as e:
        SSTReader(bad)
    assert e.value.path == bad and e.value.offset == len(data) - 8


@pytest.mark.parametrize("data", [b"", b"x", b"\x00" * 47, b"\x00" * 53, b"\x00" * 4096])
def test_not_a_table(tmp_path, data):
    path = str(tmp_path / "junk.sst")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptDataError) as e:
        SSTReader(path)
    assert e.value.path == path


def test_unsupported_format_version(tmp_path):
    path = rocksdict_sst(str(tmp_path / "v6.sst"), make_items(10), format_version=6)
    with pytest.raises(CorruptDataError, match="unsupported table format_version 6"):
        SSTReader(path)


def test_bad_snappy_with_valid_checksum(table):
    path, items = table("snappy")
    data = bytearray(open(path, "rb").read())
    with SSTReader(path) as r:
        off, size = r.block_handles()[1]
    rewrite_block(data, off, size, b"\xff" * size)
    with SSTReader(bytes(data), name="snappy-bad") as r:
        with pytest.raises(CorruptDataError, match="cannot decompress") as e:
            list(r)
        assert e.value.offset == off
        with pytest.raises(CorruptDataError, match="cannot decompress"):
            r.verify()
        r.verify(decompress=False)  # checksums only (a fetch's check): the block is as written


def test_bad_entry_with_valid_checksum(table):
    path, items = table("none")
    data = bytearray(open(path, "rb").read())
    with SSTReader(path) as r:
        off, size = r.block_handles()[1]
    block = bytearray(data[off : off + size])
    block[0:6] = b"\xff" * 6  # a varint that never ends within the block
    rewrite_block(data, off, size, bytes(block))
    with SSTReader(bytes(data), name="entry-bad") as r:
        with pytest.raises(CorruptDataError, match="data block") as e:
            list(r)
        assert e.value.offset == off
    block = bytearray(data[off : off + size])
    block[0:4] = b"\x00\xff\x7f\x00"  # non_shared = 16383: overruns the block
    rewrite_block(data, off, size, bytes(block))
    with SSTReader(bytes(data), name="entry-bad") as r:
        with pytest.raises(CorruptDataError, match="overruns") as e:
            list(r)
        assert e.value.offset == off


def test_bad_entries_are_caught_by_a_first_point_lookup(table):
    """A point lookup searches an uncached block raw (from a restart point): bad
    lengths and restart points with a valid checksum still raise, naming the block."""
    path, items = table("none")
    data = bytearray(open(path, "rb").read())
    with SSTReader(path) as r:
        off, size = r.block_handles()[1]
        keys = r._block(off, size).keys
    block = bytes(data[off:off + size])
    n_restarts = int.from_bytes(block[-4:], "little")
    restarts_at = len(block) - 4 - 4 * n_restarts
    _, non_shared, vlen, q = entry_header(block, 0, restarts_at)
    second = q + non_shared + vlen  # shares its key's first bytes with the first entry's
    assert block[second] > 0
    damages = {  # damage -> (damaged block, keys whose lookup reads it)
        "varint": (b"\xff" * 6 + block[6:], keys[:1]),
        "overruns": (b"\x00\xff\x7f\x00" + block[4:], keys[:1]),
        "restart": (block[:restarts_at] + len(block).to_bytes(4, "little") * n_restarts
                    + block[-4:], [keys[0], keys[-1]]),
        "shares": (block[:restarts_at] + second.to_bytes(4, "little") * n_restarts
                   + block[-4:], [keys[0], keys[-1]]),
    }
    for what, (bad, asked) in damages.items():
        damaged = bytearray(data)
        rewrite_block(damaged, off, size, bad)
        for key in asked:
            with SSTReader(bytes(damaged), name="probe-bad", cache=BlockCache()) as r:
                with pytest.raises(CorruptDataError, match="data block") as e:
                    r.get(key)
                assert e.value.offset == off, what


def test_block_handle_past_end_of_file(table):
    path, _ = table()
    data = open(path, "rb").read()
    footer = parse_footer(data[-53:], len(data))
    bad = data[: footer.offset] + encode_footer(
        footer, (footer.metaindex_offset, footer.metaindex_size), (footer.index_offset, 10**6)
    )
    with pytest.raises(CorruptDataError, match="extends past the end") as e:
        SSTReader(bad, name="handle")
    assert e.value.offset == footer.index_offset


def test_checksums_off_still_catches_structure_and_verify_catches_all(table):
    path, items = table("none")
    data = bytearray(open(path, "rb").read())
    with SSTReader(path) as r:
        off, size = r.block_handles()[0]
    value = items[0][1]
    pos = data.index(value, off)
    data[pos] ^= 0x01  # damage a value byte only
    with SSTReader(bytes(data), name="nock", verify_checksums=False) as r:
        assert r.get(items[1][0]) == items[1][1]
        with pytest.raises(CorruptDataError, match="checksum mismatch"):
            r.verify()
    with SSTReader(bytes(data), name="ck") as r:
        with pytest.raises(CorruptDataError):
            r.get(items[0][0])


@pytest.mark.parametrize("compression", ["snappy", "none"])
def test_every_single_byte_damage_is_caught_or_harmless(table, compression):
    """Damage each byte of a small table in turn: reading it either raises
    CorruptDataError or returns exactly the original data and properties."""
    path, items = table(compression, n=40, block_size=256)
    data = open(path, "rb").read()
    with SSTReader(data) as r:
        assert len(r.block_handles()) >= 3
    caught = harmless = 0
    cache = BlockCache()
    for pos in range(len(data)):
        for flip in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[pos] ^= flip
            try:
                with SSTReader(bytes(damaged), name="x", cache=cache) as r:
                    got = read_all(r, items)
                    props = r.user_properties
                    r.verify()
            except CorruptDataError as e:
                assert e.path == "x" and e.offset is not None
                caught += 1
                continue
            assert got == items, f"wrong data after damaging byte {pos} with {flip:#x}"
            assert props == PROPS
            harmless += 1
    assert caught > len(data)  # nearly every byte is covered by a checksum
    assert harmless < len(data) // 10  # footer padding and the like


def test_damaged_copy_does_not_poison_cache_of_good_one(table, tmp_path):
    path, items = table()
    bad = str(tmp_path / "bad.sst")
    shutil.copyfile(path, bad)
    with SSTReader(path) as r:
        off, size = r.block_handles()[0]
    with open(bad, "r+b") as f:
        f.seek(off + 3)
        b = f.read(1)
        f.seek(off + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    with SSTReader(path) as good, SSTReader(bad) as broken:
        assert list(good) == items
        with pytest.raises(CorruptDataError):
            list(broken)
        assert list(good) == items


# --- recover: a reader of a damaged copy maps a sound one and carries on ------------

def _damaged_copy(path: str, dst: str, block: int) -> tuple[int, int]:
    """``dst``: ``path`` with one byte of data block ``block`` flipped; returns its handle."""
    shutil.copyfile(path, dst)
    with SSTReader(path) as r:
        off, size = r.block_handles()[block]
    with open(dst, "r+b") as f:
        f.seek(off + size // 2)
        b = f.read(1)
        f.seek(off + size // 2)
        f.write(bytes([b[0] ^ 0x10]))
    return off, size


def test_recover_maps_a_sound_copy_once_for_all_threads(table, tmp_path):
    import threading
    from gravfs.sstable import map_file
    path, items = table()
    bad = str(tmp_path / "bad.sst")
    off, _ = _damaged_copy(path, bad, 3)
    calls: list[CorruptDataError] = []
    gate = threading.Event()

    def recover(err):
        calls.append(err)
        gate.wait(5)  # the other threads reach the bad block meanwhile
        return map_file(path)

    r = SSTReader(bad, cache=BlockCache(), recover=recover)
    assert r.get(items[0][0]) == items[0][1]  # blocks before the damage: no recovery
    assert calls == []
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(list(r))) for _ in range(6)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(30)
    assert results == [items] * 6
    assert len(calls) == 1 and calls[0].offset == off and calls[0].path == bad
    assert all(r.get(k) == v for k, v in items)
    r.close()


def test_recover_that_fails_leaves_the_reader_as_it_was(table, tmp_path):
    from gravfs.sstable import map_file
    path, items = table()
    bad = str(tmp_path / "bad.sst")
    _damaged_copy(path, bad, 2)
    tries: list[int] = []

    def unreachable(err):
        tries.append(1)
        raise OSError("store out of reach")

    with SSTReader(bad, cache=BlockCache(), recover=unreachable) as r:
        for _ in range(2):  # each read tries again: nothing was used up
            with pytest.raises(OSError, match="out of reach"):
                list(r)
        assert len(tries) == 2
        assert r.get(items[0][0]) == items[0][1]
    # a copy that is bad too: the error, once, and no second recovery
    worse = str(tmp_path / "worse.sst")
    shutil.copyfile(bad, worse)
    with SSTReader(bad, cache=BlockCache(), recover=lambda err: map_file(worse)) as r:
        with pytest.raises(CorruptDataError, match="checksum mismatch"):
            list(r)
        with pytest.raises(CorruptDataError, match="checksum mismatch"):
            list(r)
    # a copy of another size is refused
    with SSTReader(bad, cache=BlockCache(), recover=lambda err: b"\0" * 10) as r:
        with pytest.raises(CorruptDataError, match="fetched again has 10 bytes"):
            list(r)


def test_shared_block_images_are_checked(tmp_path):
    """Two tables holding the same block, damaged alike in both copies, must not
    pass for sharing it: unshared_items checks every image it compares."""
    from gravfs.sstable import unshared_items
    items = make_items(600)
    edited = items[:-1] + [(items[-1][0], b"changed")]
    pa, pb = str(tmp_path / "a.sst"), str(tmp_path / "b.sst")
    write_sst(pa, items, PROPS, block_size=1024)
    write_sst(pb, edited, PROPS, block_size=1024)
    with SSTReader(pa) as a, SSTReader(pb) as b:
        assert a.block_images()[1] == b.block_images()[1]  # shared
        off, size = a.block_handles()[1]
    for p in (pa, pb):
        with open(p, "r+b") as f:
            f.seek(off)
            f.write(bytes(size + 5))  # zeroed, as a crash can leave a page
    with SSTReader(pa) as a, SSTReader(pb) as b:
        with pytest.raises(CorruptDataError) as e:
            unshared_items(a, b)
        assert e.value.offset == off
