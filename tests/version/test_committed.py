"""Committed layer: record encoding, IDs, entries, break policy, lakeFS compat, get/iter/apply."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import replace

import pytest

from gravfs.fs.entry import (KIND_DIRECTORY, KIND_SYMLINK, EntryInfo, decode_entry, encode_entry,
                             entry_identity, entry_record)
from gravfs.version.committed import (
    EMPTY_ID, BreakPolicy, Change, CommittedManager, Record, SizeAwareBreakPolicy, decode_value,
    encode_value, metarange_id, policy_from_dict, range_id, value_record_id)
from gravfs.version.committed.breaks import (LAKEFS_MAX_RANGE_SIZE, LAKEFS_MIN_RANGE_SIZE,
                                     LAKEFS_RANGE_RAGGEDNESS)
from gravfs.version.committed import manager as manager_module
from gravfs.version.committed.reader import metarange_key, range_key
from gravfs.version.committed.record import decode_record, put_varint
from gravfs.errors import CorruptDataError, NotFoundError
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier

TINY = BreakPolicy(200, 2048, 8, seed=11)

LAKEFS_RANGE_ID = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"


def make_manager(root, policy=TINY, **kw) -> CommittedManager:
    store = LocalStore(os.path.join(root, "store"), fsync=False)
    tier = LocalTier(store, os.path.join(root, "cache"), 1 << 30, fsync=False)
    return CommittedManager(store, tier, policy, **kw)


@pytest.fixture
def mgr(tmp_path):
    m = make_manager(str(tmp_path))
    yield m
    m.close()


def rec(i: int, tag: bytes = b"", key_fmt: bytes = b"dir%02d/file%06d") -> Record:
    key = key_fmt % (i % 7, i) if key_fmt.count(b"%") == 2 else key_fmt % i
    ident = hashlib.sha256(key + b"|" + tag).digest()
    return Record(key, ident, b"payload-" + tag + key)


def sorted_records(n: int, tag: bytes = b"") -> list[Record]:
    return sorted((rec(i, tag) for i in range(n)), key=lambda r: r.key)


# --- record encoding ---------------------------------------------------------

def test_varint_matches_go_putvarint():
    # Values checked against Go's binary.PutVarint (zigzag, little-endian base 128).
    assert put_varint(0) == b"\x00"
    assert put_varint(1) == b"\x02"
    assert put_varint(-1) == b"\x01"
    assert put_varint(32) == b"\x40"
    assert put_varint(63) == b"\x7e"
    assert put_varint(64) == b"\x80\x01"
    assert put_varint(86) == b"\xac\x01"
    assert put_varint(-65) == b"\x81\x01"
    assert put_varint(1 << 40) == bytes.fromhex("808080808040")


@pytest.mark.parametrize("ilen,dlen", [(0, 0), (32, 0), (32, 63), (32, 64), (64, 200),
                                       (5, 8191), (3, 8192), (1, 70000)])
def test_value_round_trip(ilen, dlen):
    ident, data = os.urandom(ilen), os.urandom(dlen)
    v = encode_value(ident, data)
    assert decode_value(v) == (ident, data)
    assert decode_value(v + b"trailing junk") == (ident, data)
    assert decode_record(b"k", v) == Record(b"k", ident, data)
    assert decode_record(b"k", v + b"\x00\x01") == Record(b"k", ident, data)


def test_value_decode_rejects_truncated_and_negative():
    v = encode_value(b"x" * 32, b"y" * 100)
    for cut in (0, 1, 20, 33, 34, len(v) - 1):
        with pytest.raises(CorruptDataError):
            decode_value(v[:cut])
    with pytest.raises(CorruptDataError):
        decode_value(put_varint(-3) + b"abc")
    with pytest.raises(CorruptDataError):
        decode_record(b"k", v[:40])


def test_lakefs_encoded_values_decode():
    # Values as lakeFS wrote them into the compat range.sst / metarange.sst.
    range_value = bytes.fromhex(
        "4056FEF3921AA6E7FD62BBE23B2F69DB3F9049A54B6F2C7BD886B7EB1A6CA3AB3EAC010A2062306339363837"
        "3336643866343261326231633632383438333566303832323612" "0C08809CAF880610CB94D3E001180B2220"
        "3636346336383862346561396335363733306461616366633364373061656564" "3001")
    ident, data = decode_value(range_value)
    assert len(ident) == 32
    e = decode_entry(data)
    assert e.address == "b0c968736d8f42a2b1c6284835f08226"
    assert e.size == 11
    assert e.e_tag == "664c688b4ea9c56730daacfc3d70aeed"
    assert e.mtime_ns == 1628163584 * 10**9 + 471124555
    meta_value = bytes.fromhex(
        "8001" + LAKEFS_RANGE_ID.encode().hex() + "34"
        "0A08612F622F632F6E6F1209612F622F632F79657318A6092002")
    ident, data = decode_value(meta_value)
    assert ident.decode() == LAKEFS_RANGE_ID


# --- IDs ---------------------------------------------------------------------

def test_id_formulas():
    h = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    assert value_record_id(b"a/b", b"ID") == h(h(b"a/b") + h(b"ID"))
    recs = [(b"a", b"1"), (b"b", b"2")]
    assert range_id(recs) == hashlib.sha256(
        h(h(b"a") + h(b"1")) + h(h(b"b") + h(b"2"))).hexdigest()
    assert metarange_id([(b"b", "ff" * 32)]) == hashlib.sha256(
        h(h(b"b") + h(b"ff" * 32))).hexdigest()
    assert EMPTY_ID == hashlib.sha256(b"").hexdigest()
    assert range_id([]) == EMPTY_ID


def test_ids_depend_on_logical_content_not_sst_bytes(tmp_path):
    recs = sorted_records(3000)
    a = make_manager(str(tmp_path / "a"), compression="snappy", block_size=4096)
    b = make_manager(str(tmp_path / "b"), compression="none", block_size=512)
    ida, idb = a.write_metarange(recs), b.write_metarange(recs)
    assert ida == idb
    ra, rb = a.iter_ranges(ida), b.iter_ranges(idb)
    assert len(ra) > 20
    assert [r.id for r in ra] == [r.id for r in rb]
    # ... but the SST files are different bytes.
    ka = a.store.get(range_key(ra[0].id))
    kb = b.store.get(range_key(rb[0].id))
    assert ka != kb
    # The range IDs are the seed formula over the range's own records.
    assert ra[0].id == range_id([(r.key, r.identity) for r in a.range_records(ra[0].id)])
    assert ida == metarange_id([(r.max_key, r.id) for r in ra])
    # Changing one identity changes exactly one range ID.
    recs2 = list(recs)
    recs2[1500] = recs2[1500]._replace(identity=b"\x00" * 32)
    rc = a.iter_ranges(a.write_metarange(recs2))
    assert sum(x.id != y.id for x, y in zip(ra, rc)) == 1
    # Data bytes are not hashed (identity is what makes records "the same"); only
    # their length matters, through the size-based range boundaries.
    recs3 = [r._replace(data=bytes(len(r.data))) for r in recs]
    assert a.write_metarange(recs3) == ida
    a.close()
    b.close()


def test_empty_tree(mgr):
    assert mgr.write_metarange([]) == EMPTY_ID
    assert mgr.get(EMPTY_ID, b"x") is None
    assert list(mgr.iter(EMPTY_ID)) == []
    assert mgr.iter_ranges(EMPTY_ID) == []
    assert not list(mgr.store.list("_gravfs/"))
    r = mgr.apply(EMPTY_ID, [Change.delete(b"nothing")])
    assert r.metarange_id == EMPTY_ID and r.stats.metaranges_written == 0
    mid = mgr.apply(EMPTY_ID, [Change.put(b"a", b"i" * 32, b"d")]).metarange_id
    assert [tuple(r) for r in mgr.iter(mid)] == [(b"a", b"i" * 32, b"d")]
    assert mgr.apply(mid, [Change.delete(b"a")]).metarange_id == EMPTY_ID


def test_unsorted_input_rejected(mgr):
    with pytest.raises(ValueError):
        mgr.write_metarange([rec(2), rec(1)])
    with pytest.raises(ValueError):
        mgr.write_metarange([rec(1), rec(1)])
    mid = mgr.write_metarange(sorted_records(100))
    with pytest.raises(ValueError):
        mgr.apply(mid, [Change.delete(b"b"), Change.delete(b"a")])


# --- entries -----------------------------------------------------------------

def test_entry_round_trip_and_identity():
    e = EntryInfo(address="data/ab/abcdef", size=1234, mtime_ns=1_700_000_000_123_456_789,
                  mode=0o100640, uid=1000, gid=100, xattrs={"user.a": b"\x00\x01"},
                  metadata={"k": "v"}, content_type="text/plain", e_tag="etag")
    data = encode_entry(e)
    d = decode_entry(data)
    assert d == e
    assert entry_identity(data) == entry_identity(e) == entry_identity(d)
    assert len(entry_identity(e)) == 32
    variants = [
        dict(address="data/ab/other"), dict(size=1235), dict(mtime_ns=e.mtime_ns + 1),
        dict(mode=0o100644), dict(uid=0), dict(gid=0), dict(xattrs={"user.a": b"\x00\x02"}),
        dict(xattrs={}), dict(metadata={"k": "w"}), dict(content_type=""), dict(e_tag="x"),
    ]
    seen = {entry_identity(e)}
    for v in variants:
        other = replace(e, **v)
        ident = entry_identity(other)
        assert ident not in seen, v
        seen.add(ident)
    # Map order does not matter.
    a = EntryInfo(xattrs={"a": b"1", "b": b"2"}, metadata={"x": "1", "y": "2"})
    b = EntryInfo(xattrs={"b": b"2", "a": b"1"}, metadata={"y": "2", "x": "1"})
    assert entry_identity(a) == entry_identity(b)
    assert encode_entry(a) == encode_entry(b)


def test_entry_kinds_and_modes():
    d = EntryInfo(kind=KIND_DIRECTORY)
    assert d.mode == 0o040755 and d.is_dir
    s = decode_entry(encode_entry(EntryInfo(kind=KIND_SYMLINK, symlink_target="../x")))
    assert s.is_symlink and s.symlink_target == "../x" and s.mode == 0o120777
    f = EntryInfo(mode=0o600)
    assert f.mode == 0o100600
    assert EntryInfo(mode=0o040700).kind == KIND_DIRECTORY
    r = entry_record("dir/f", f)
    assert r.key == b"dir/f" and r.identity == entry_identity(f)
    assert decode_entry(r.data) == f


def test_entry_fields_are_lakefs_compatible():
    # lakeFS's parser knows fields 1-7 only: the gravfs fields must not disturb it.
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass
    fd = descriptor_pb2.FileDescriptorProto(name="lakefs_entry_test.proto", package="lk",
                                            syntax="proto3")
    m = fd.message_type.add(name="Entry")
    F = descriptor_pb2.FieldDescriptorProto
    for name, num, t in (("address", 1, F.TYPE_STRING), ("size", 3, F.TYPE_INT64),
                         ("e_tag", 4, F.TYPE_STRING), ("address_type", 6, F.TYPE_INT32)):
        m.field.add(name=name, number=num, type=t, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    LkEntry = GetMessageClass(pool.FindMessageTypeByName("lk.Entry"))
    e = EntryInfo(address="data/x", size=77, e_tag="t", mode=0o100600, xattrs={"a": b"b"})
    parsed = LkEntry.FromString(encode_entry(e))
    assert (parsed.address, parsed.size, parsed.e_tag, parsed.address_type) == ("data/x", 77, "t", 1)


def test_corrupt_entry():
    with pytest.raises(CorruptDataError):
        decode_entry(b"\x0a\xff\xff")


# --- break policy ------------------------------------------------------------

def test_lakefs_default_parameters():
    p = BreakPolicy.lakefs_defaults(seed=5)
    assert (p.min_size, p.max_size, p.raggedness) == (0, 20 * 1024 * 1024, 50_000)
    assert (LAKEFS_MIN_RANGE_SIZE, LAKEFS_MAX_RANGE_SIZE, LAKEFS_RANGE_RAGGEDNESS) == (
        0, 20 * 1024 * 1024, 50_000)


def test_policy_rules_and_serialization():
    p = BreakPolicy(100, 1000, 4, seed=3)
    assert not p.should_break(b"k", 10, 99)
    assert p.should_break(b"k", 10, 1000)
    hits = sum(p.should_break(b"key%d" % i, 10, 500) for i in range(4000))
    assert 800 < hits < 1200  # about 1 in 4
    # The seed moves boundaries.
    q = BreakPolicy(100, 1000, 4, seed=4)
    assert [p.should_break(b"key%d" % i, 1, 500) for i in range(200)] != \
        [q.should_break(b"key%d" % i, 1, 500) for i in range(200)]
    s = SizeAwareBreakPolicy(0, 10**9, 10_000, seed=1)
    small = sum(s.should_break(b"k%d" % i, 100, 5000) for i in range(20000))
    big = sum(s.should_break(b"k%d" % i, 1000, 5000) for i in range(20000))
    assert 120 < small < 280 and 1600 < big < 2400  # probability = record size / target
    for pol in (p, s, BreakPolicy.lakefs_defaults(9)):
        assert policy_from_dict(pol.to_dict()) == pol
    with pytest.raises(ValueError):
        BreakPolicy(10, 5, 1)


def test_ranges_follow_policy(mgr):
    recs = sorted_records(4000)
    mid = mgr.write_metarange(recs)
    ranges = mgr.iter_ranges(mid)
    assert sum(r.count for r in ranges) == 4000
    pos = 0
    for i, r in enumerate(ranges):
        chunk = recs[pos:pos + r.count]
        assert (chunk[0].key, chunk[-1].key) == (r.min_key, r.max_key)
        sizes = [len(x.key) + len(encode_value(x.identity, x.data)) for x in chunk]
        total = 0
        for j, x in enumerate(chunk):
            total += sizes[j]
            brk = TINY.should_break(x.key, sizes[j], total)
            # No break inside a range; a break at its end (except the very last range).
            assert brk == (j == len(chunk) - 1) or (i == len(ranges) - 1 and j == len(chunk) - 1)
        pos += r.count
    # Properties on the range SST are lakeFS's.
    from gravfs.sstable import SSTReader
    rd = SSTReader(mgr.store.get(range_key(ranges[3].id)))
    props = rd.user_properties
    assert props["type"] == b"ranges"
    assert props["min_key"] == ranges[3].min_key and props["max_key"] == ranges[3].max_key
    assert int(props["count"]) == ranges[3].count
    assert int(props["estimated_size_bytes"]) > 0
    md = SSTReader(mgr.store.get(metarange_key(mid)))
    assert md.user_properties["type"] == b"metaranges"
    assert md.num_entries == len(ranges)


# --- lakeFS files --------------------------------------------------------------

def test_reads_lakefs_metarange_and_range(tmp_path, compat_dir):
    m = make_manager(str(tmp_path))
    lk = os.path.join(compat_dir, "lakefs")
    m.store.put(metarange_key("lakefs-compat"), open(os.path.join(lk, "metarange.sst"), "rb").read())
    m.store.put(range_key(LAKEFS_RANGE_ID), open(os.path.join(lk, "range.sst"), "rb").read())
    ranges = m.iter_ranges("lakefs-compat")
    assert len(ranges) == 1
    r = ranges[0]
    assert (r.id, r.min_key, r.max_key, r.count, r.estimated_size) == (
        LAKEFS_RANGE_ID, b"a/b/c/no", b"a/b/c/yes", 2, 1190)
    recs = list(m.iter("lakefs-compat"))
    assert [x.key for x in recs] == [b"a/b/c/no", b"a/b/c/yes"]
    assert all(len(x.identity) == 32 for x in recs)
    no, yes = (decode_entry(x.data) for x in recs)
    assert no.address == "b0c968736d8f42a2b1c6284835f08226" and no.size == 11
    assert no.e_tag == "664c688b4ea9c56730daacfc3d70aeed"
    assert yes.address == "fdf87fcf9ec849f98514ddb7e041ad56" and yes.size == 4
    assert yes.e_tag == "eb4585ad9fe0426781ed7c49252f8225"
    assert no.address_type == yes.address_type == 1  # RELATIVE
    assert no.kind == 0 and no.mode == 0o100644
    assert m.get("lakefs-compat", b"a/b/c/yes") == recs[1]
    assert m.get("lakefs-compat", b"a/b/c/maybe") is None
    assert [x.key for x in m.iter("lakefs-compat", b"a/b/c/o")] == [b"a/b/c/yes"]
    # A gravfs tree built from the lakeFS records diffs/merges against it.
    mid = m.apply("lakefs-compat", [Change.delete(b"a/b/c/no")]).metarange_id
    assert [d.key for d in m.diff("lakefs-compat", mid)] == [b"a/b/c/no"]
    m.close()


def test_reads_lakefs_snappy_range(tmp_path, compat_dir):
    m = make_manager(str(tmp_path))
    m.store.put(range_key("ok1"), open(os.path.join(compat_dir, "lakefs", "ok1.sst"), "rb").read())
    recs = list(m.range_records("ok1"))
    assert len(recs) == 105
    assert recs[0].key == b"first" and recs[-1].key == b"xyzzy"
    assert all(len(r.identity) == 32 for r in recs)
    assert all(decode_entry(r.data).address for r in recs)
    m.close()


# --- get / iter ----------------------------------------------------------------

def test_get_and_iter(mgr):
    recs = sorted_records(5000)
    mid = mgr.write_metarange(recs)
    assert len(mgr.iter_ranges(mid)) > 50
    for r in recs[::97]:
        assert mgr.get(mid, r.key) == r
    assert mgr.get(mid, b"") is None
    assert mgr.get(mid, b"zzz") is None
    assert mgr.get(mid, recs[10].key + b"\x00") is None
    assert list(mgr.iter(mid)) == recs
    for start in (recs[1234].key, recs[1234].key + b"\x00", b"", b"dir03", b"\xff"):
        assert list(mgr.iter(mid, start)) == [r for r in recs if r.key >= start]
    # A fresh manager (cold caches) over the same store reads the same tree.
    m2 = CommittedManager(mgr.store, mgr.tier, TINY)
    assert m2.get(mid, recs[4000].key) == recs[4000]
    m2.close()


@pytest.mark.parametrize("dense", [1, 1 << 30])  # every range scanned / every key looked up
def test_values_at_is_get_value_of_each_key(mgr, monkeypatch, dense):
    monkeypatch.setattr(manager_module, "DENSE_LOOKUPS", dense)
    recs = sorted_records(3000)
    mid = mgr.write_metarange(recs)
    keys = [r.key for r in recs]
    probes = [
        [], keys, keys[::2], keys[1500:1510], [keys[0], keys[-1]],
        [b"", keys[0][:-1], keys[0]],                       # before the first key
        sorted(keys[::50] + [k + b"\x00" for k in keys[::31]]),  # absent keys between
        [keys[-1] + b"\x00", b"\xff", b"\xff\xff"],          # past the last range
    ]
    for want in probes:
        assert mgr.values_at(mid, want) == [mgr.get_value(mid, k) for k in want]
    assert mgr.values_at(EMPTY_ID, keys[:3]) == [None] * 3


def test_missing_metarange(mgr):
    with pytest.raises(NotFoundError):
        mgr.get("ab" * 32, b"x")
    assert not mgr.exists("ab" * 32)
    assert mgr.exists(EMPTY_ID)


def test_corrupt_cached_range_is_refetched(tmp_path):
    m = make_manager(str(tmp_path))
    recs = sorted_records(500)
    mid = m.write_metarange(recs)
    assert m.get(mid, recs[100].key) == recs[100]
    rid = m.iter_ranges(mid)[m.metarange(mid).locate(recs[100].key)].id
    cached = os.path.join(str(tmp_path), "cache", "objects", range_key(rid))
    assert os.path.exists(cached)
    m.close()
    # A damaged cached copy (bytes flipped in the middle); a new process verifies it
    # on first use. The copy of a range written here is the store's own file (a hard
    # link), so the damaged copy replaces it rather than changing it in place.
    assert os.stat(cached).st_ino == os.stat(m.store._path(range_key(rid))).st_ino
    data = bytearray(open(cached, "rb").read())
    data[40:48] = bytes(x ^ 0xFF for x in data[40:48])
    with open(cached + ".new", "wb") as f:
        f.write(data)
    os.replace(cached + ".new", cached)
    m2 = make_manager(str(tmp_path))
    assert m2.get(mid, recs[100].key) == recs[100]
    assert m2.tier.stats.verify_failures == 1
    assert m2.tier.stats.fetches == 1
    m2.close()


def _cached_range(m, mid, key: bytes) -> tuple[str, str]:
    """(range ID, path of its cached copy) of the range holding ``key``, made a copy
    of its own (the tier links the store's file for a range written here)."""
    rid = m.iter_ranges(mid)[m.metarange(mid).locate(key)].id
    cached = m.tier._path(range_key(rid))
    shutil.copyfile(cached, cached + ".own")
    os.replace(cached + ".own", cached)
    return rid, cached


def test_damaged_block_of_a_cached_range_is_found_when_read(tmp_path):
    """A cached range is opened without a full pass: a damaged block is found
    when a lookup or scan first reads it, and the reader goes on with a fresh copy."""
    from gravfs.sstable import SSTReader
    m = make_manager(str(tmp_path), policy=BreakPolicy(40000, 80000, 1000, seed=3))
    recs = sorted_records(3000)
    mid = m.write_metarange(recs)
    rid, cached = _cached_range(m, mid, recs[0].key)
    with SSTReader(cached) as r:
        handles = r.block_handles()
        assert len(handles) > 4
        off, size = handles[-2]
        victim = next(k for k, _ in r.seek(r._index_keys[-3] + b"\0"))
    m.close()
    data = bytearray(open(cached, "rb").read())
    data[off + size // 2] ^= 0x01
    open(cached, "wb").write(data)
    m2 = make_manager(str(tmp_path), policy=BreakPolicy(40000, 80000, 1000, seed=3))
    assert m2.get(mid, recs[0].key) == recs[0]  # block 0: read from the cached copy
    assert m2.tier.stats.fetches == 0 and m2.tier.stats.verify_failures == 0
    want = next(r for r in recs if r.key == victim)
    assert m2.get(mid, victim) == want  # the damaged block: a fresh copy
    assert m2.tier.stats.fetches == 1 and m2.tier.stats.verify_failures == 1
    assert list(m2.iter(mid)) == recs
    assert m2.tier.stats.fetches == 1
    m2.close()


@pytest.mark.parametrize("cut", [0, 1, 4096])
def test_torn_cached_range_is_fetched_again(tmp_path, cut):
    """What a power cut can leave of an unsynced copy: empty, or cut short."""
    m = make_manager(str(tmp_path))
    recs = sorted_records(500)
    mid = m.write_metarange(recs)
    _rid, cached = _cached_range(m, mid, recs[100].key)
    m.close()
    with open(cached, "r+b") as f:
        f.truncate(min(cut, os.path.getsize(cached) - 1))
    m2 = make_manager(str(tmp_path))
    assert list(m2.iter(mid)) == recs
    assert m2.tier.stats.verify_failures == 1 and m2.tier.stats.fetches == 1
    m2.close()


@pytest.mark.timeout(60)
def test_range_damaged_in_the_store_too_raises(tmp_path):
    """The cached copy is the store's file (a hard link): both are damaged, so the
    fetch does not help and the error reaches the caller once, with no hang."""
    m = make_manager(str(tmp_path))
    recs = sorted_records(500)
    mid = m.write_metarange(recs)
    rid = m.iter_ranges(mid)[m.metarange(mid).locate(recs[100].key)].id
    cached = m.tier._path(range_key(rid))
    assert os.stat(cached).st_ino == os.stat(m.store._path(range_key(rid))).st_ino
    m.close()
    with open(cached, "r+b") as f:  # in place: the store's file as well
        f.seek(10)
        b = f.read(1)
        f.seek(10)
        f.write(bytes([b[0] ^ 0xFF]))
    m2 = make_manager(str(tmp_path))
    with pytest.raises(CorruptDataError, match="checksum mismatch"):
        list(m2.iter(mid))
    assert m2.tier.stats.verify_failures >= 2
    m2.close()


# --- apply ---------------------------------------------------------------------

def test_apply_basic(mgr):
    recs = sorted_records(3000)
    mid = mgr.write_metarange(recs)
    changes = [Change.put(recs[10].key, b"n" * 32, b"new"), Change.delete(recs[20].key),
               Change.put(recs[30].key + b"-ins", b"i" * 32, b"ins"), Change.delete(b"missing")]
    res = mgr.apply(mid, changes)
    model = {r.key: r for r in recs}
    model[recs[10].key] = Record(recs[10].key, b"n" * 32, b"new")
    del model[recs[20].key]
    model[recs[30].key + b"-ins"] = Record(recs[30].key + b"-ins", b"i" * 32, b"ins")
    assert list(mgr.iter(res.metarange_id)) == [model[k] for k in sorted(model)]
    assert res.stats.metaranges_written == 1
    assert res.stats.ranges_written <= res.stats.ranges_read <= 6
    # Same result as writing the final records from scratch (boundaries are content-defined).
    assert res.metarange_id == mgr.write_metarange([model[k] for k in sorted(model)])


def test_apply_noop_returns_base(mgr):
    recs = sorted_records(2000)
    mid = mgr.write_metarange(recs)
    before = sorted(mgr.store.list("_gravfs/"))
    res = mgr.apply(mid, [Change.delete(b"absent"), Change.put(recs[5].key, recs[5].identity,
                                                                recs[5].data)])
    assert res.metarange_id == mid
    assert res.stats.ranges_written == 0 and res.stats.metaranges_written == 0
    assert sorted(mgr.store.list("_gravfs/")) == before
    assert mgr.apply(mid, []).metarange_id == mid


def test_apply_accepts_records_and_plain_tuples(mgr):
    mid = mgr.write_metarange(sorted_records(100))
    a = mgr.apply(mid, [Record(b"a", b"x" * 32, b"d")]).metarange_id
    b = mgr.apply(mid, [(b"a", b"x" * 32, b"d")]).metarange_id
    assert a == b
    c = mgr.apply(a, [(b"a", None, b"")]).metarange_id
    assert c == mid


def test_apply_delete_everything_and_rebuild(mgr):
    recs = sorted_records(1500)
    mid = mgr.write_metarange(recs)
    assert mgr.apply(mid, [Change.delete(r.key) for r in recs]).metarange_id == EMPTY_ID
    half = mgr.apply(mid, [Change.delete(r.key) for r in recs[::2]]).metarange_id
    assert list(mgr.iter(half)) == recs[1::2]


def test_apply_one_change_in_100k_tree_reads_one_range(tmp_path):
    policy = BreakPolicy(8 * 1024, 128 * 1024, 256, seed=2)
    m = make_manager(str(tmp_path), policy)
    recs = [Record(b"p/%07d" % i, hashlib.sha256(b"%d" % i).digest(), b"d%07d" % i)
            for i in range(100_000)]
    mid = m.write_metarange(recs)
    ranges = m.iter_ranges(mid)
    assert len(ranges) > 50
    mr = m.metarange(mid)
    for i in (0, 777, 31_337, 50_000, 99_999):
        # Same-size update: exactly one range read and rewritten.
        res = m.apply(mid, [Change.put(recs[i].key, b"u" * 32, b"e%07d" % i)])
        s = res.stats
        assert (s.ranges_read, s.ranges_written, s.metaranges_written) == (1, 1, 1), (i, s)
        assert s.ranges_reused == len(ranges) - 1
        assert m.get(res.metarange_id, recs[i].key).identity == b"u" * 32
    for change in (Change.delete(recs[4242].key), Change.put(recs[4242].key + b"x", b"i" * 32, b"v"),
                   Change.put(mr.max_keys[10], b"m" * 32, b"bigger-than-before" * 3)):
        s = m.apply(mid, [change]).stats
        assert 1 <= s.ranges_read <= 2 and s.ranges_written <= s.ranges_read, (change, s)
        assert s.metaranges_written == 1
        assert s.ranges_reused >= len(ranges) - 2
    # Insert exactly between two ranges: goes into the range after.
    k = mr.max_keys[20] + b"\x00"
    s = m.apply(mid, [Change.put(k, b"z" * 32, b"")]).stats
    assert 1 <= s.ranges_read <= 2
    m.close()


def test_apply_copies_untouched_ranges_unread(tmp_path):
    m = make_manager(str(tmp_path))
    recs = sorted_records(3000)
    mid = m.write_metarange(recs)
    ranges = m.iter_ranges(mid)
    # Remove every untouched range object: apply must not need them.
    target = len(ranges) // 2
    r = ranges[target]
    for x in ranges:
        if x.id != r.id:
            m.store.delete(range_key(x.id))
    shutil.rmtree(os.path.join(str(tmp_path), "cache"))
    m2 = make_manager(str(tmp_path))
    res = m2.apply(mid, [Change.put(r.min_key, b"q" * 32, b"")])
    new = m2.iter_ranges(res.metarange_id)
    assert [x.id for x in new[:target]] == [x.id for x in ranges[:target]]
    assert res.stats.ranges_read >= 1
    m2.close()
    m.close()


# --- real S3 (SeaweedFS) ---------------------------------------------------------

def test_trees_on_s3(s3_store, tmp_path):
    tier = LocalTier(s3_store, str(tmp_path / "cache"), 1 << 30, fsync=False)
    m = CommittedManager(s3_store, tier, TINY)
    recs = sorted_records(1500)
    mid = m.write_metarange(recs)
    assert m.metarange(mid).count == 1500
    assert metarange_key(mid) in set(s3_store.list("_gravfs/metaranges/"))
    # A second writer of the same content finds the objects already there.
    again = m.write_tree(recs)
    assert again.metarange_id == mid and again.stats.bytes_written == 0
    # Read back through a cold tier.
    m2 = CommittedManager(s3_store, LocalTier(s3_store, str(tmp_path / "cache2"), 1 << 30,
                                              fsync=False), TINY)
    assert list(m2.iter(mid)) == recs
    a = m2.apply(mid, [Change.put(recs[700].key, b"s" * 32, b"x")])
    b = m2.apply(mid, [Change.delete(recs[10].key)])
    merged = m2.merge(mid, a.metarange_id, b.metarange_id)
    d = [(x.key, x.kind) for x in m2.diff(mid, merged.metarange_id)]
    assert d == [(recs[10].key, "removed"), (recs[700].key, "changed")]
    m.close()
    m2.close()


def test_open_reader_cache_is_bounded(tmp_path):
    m = make_manager(str(tmp_path), max_open_ranges=8)
    recs = sorted_records(3000)
    mid = m.write_metarange(recs)
    n = len(m.iter_ranges(mid))
    assert n > 40
    it = m.iter(mid)
    first = [next(it) for _ in range(5)]
    for r in recs[::50]:
        assert m.get(mid, r.key) == r
    assert len(m.ranges._ranges) <= 8
    # An iterator whose reader was evicted keeps reading.
    assert first + list(it) == recs
    m.ranges.max_open_bytes = 1
    assert m.get(mid, recs[0].key) == recs[0]  # range 0's reader was evicted long ago
    assert [r.key for r in m.range_records(m.iter_ranges(mid)[0].id)][:3] == [r.key for r in recs[:3]]
    assert len(m.ranges._ranges) == 1
    m.close()
