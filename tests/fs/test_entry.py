"""Entry records: the kinds and fields added for POSIX (special files, times, hard
links) round-trip, and every record written before keeps its bytes and identity."""

import copy
import pickle
import stat
from dataclasses import fields, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.fs.entry import (_DEFAULT_MODE, KIND_BLOCK_DEVICE, KIND_CHAR_DEVICE, KIND_FIFO, KIND_FILE,
                             KIND_SOCKET, TIME_NS_MAX, TIME_NS_MIN, EntryInfo, decode_entry,
                             encode_entry, entry_identity, kind_of_mode, same_but_times,
                             shown_atime)
from gravfs.version.committed.messages import Entry

# written by gravfs before the POSIX fields existed (commit 7b187b6's entry.py)
OLD_BYTES = bytes.fromhex("0a0e646174612f61622f616263646566120b0880a0f8fa0510959aef3a180b3001"
                          "a001a08302ba010b0a06757365722e61120131c00105c80106")
OLD_IDENTITY = "face2645c42a1d925762264f09b57acb980b2672ee80b1ff25ed8ba304685402"


def _old() -> EntryInfo:
    return EntryInfo(address="data/ab/abcdef", size=11, mtime_ns=1_600_000_000_123_456_789,
                     mode=0o100640, uid=5, gid=6, xattrs={"user.a": b"1"})


def test_records_written_before_keep_bytes_and_identity():
    assert encode_entry(_old()) == OLD_BYTES
    assert entry_identity(_old()).hex() == OLD_IDENTITY
    e = decode_entry(OLD_BYTES)
    assert e == _old() and (e.atime_ns, e.ctime_ns, e.rdev, e.link_group, e.nlink) == (
        None, 0, 0, "", 1)
    assert shown_atime(e) == e.mtime_ns


def test_special_kinds_times_and_links_round_trip_and_count_in_the_identity():
    e = EntryInfo(mode=stat.S_IFCHR | 0o600, rdev=0x0103, mtime_ns=7, atime_ns=5, ctime_ns=9,
                  link_group="g1", links=(b"a/x", b"b"), uid=1, gid=2)
    assert e.kind == KIND_CHAR_DEVICE and e.nlink == 2
    back = decode_entry(encode_entry(e))
    assert back == e and entry_identity(back) == entry_identity(e)
    for field, value in (("atime_ns", 6), ("ctime_ns", 8), ("rdev", 0x0104),
                         ("link_group", "g2"), ("links", (b"a/x",))):
        other = replace(e, **{field: value})
        assert entry_identity(other) != entry_identity(e), field
    assert [kind_of_mode(m) for m in (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFBLK, stat.S_IFREG)] == [
        KIND_FIFO, KIND_SOCKET, KIND_BLOCK_DEVICE, KIND_FILE]
    assert EntryInfo(kind=KIND_FIFO).mode == stat.S_IFIFO | 0o644


_text = st.text(max_size=12)
_infos = st.builds(
    EntryInfo, address=_text, size=st.integers(0, 1 << 50),
    mtime_ns=st.integers(0, 1 << 62), mode=st.integers(0, 0o177777),
    kind=st.sampled_from(sorted(_DEFAULT_MODE)), symlink_target=_text,
    xattrs=st.dictionaries(_text, st.binary(max_size=8), max_size=2),
    uid=st.integers(0, 1 << 31), gid=st.integers(0, 1 << 31), e_tag=_text, content_type=_text,
    metadata=st.dictionaries(_text, _text, max_size=2), address_type=st.integers(0, 2),
    atime_ns=st.none() | st.integers(0, 1 << 62), ctime_ns=st.integers(0, 1 << 62),
    rdev=st.integers(0, 1 << 32), link_group=_text,
    links=st.lists(st.binary(min_size=1, max_size=6), max_size=3).map(tuple)
).map(lambda e: e if e.link_group else replace(e, links=()))  # a group's records list links


@settings(max_examples=300, deadline=None)
@given(_infos)
def test_decode_fills_every_field_as_the_constructor_does(info):
    """decode_entry builds EntryInfo without its __init__: the result equals the
    constructor's, normalization of the mode and kind included."""
    back = decode_entry(encode_entry(info))
    assert back == info  # (a field decode_entry left unset would raise here)
    assert all(isinstance(getattr(back, f.name), type(getattr(info, f.name)))
               for f in fields(EntryInfo))  # (an empty map is the shared one: a dict too)
    assert entry_identity(back) == entry_identity(info)


def test_decoded_entries_share_one_empty_map_that_refuses_changes_and_copies_plain():
    """Absent xattrs and metadata are one shared mapping (two dicts a decode saved):
    changing it in place would change every entry, so it refuses; a copy of an
    entry (pickle, deepcopy: Spark ships entries) gets a dict of its own."""
    data = encode_entry(EntryInfo(address="a", size=1))
    a, b = decode_entry(data), decode_entry(data)
    assert a.xattrs is b.xattrs is a.metadata and a.xattrs == {}
    for change in (lambda m: m.__setitem__("k", b"v"), lambda m: m.update(k=b"v"),
                   lambda m: m.setdefault("k", b"v"), lambda m: m.pop("k", None),
                   lambda m: m.clear(), lambda m: m.__delitem__("k")):
        with pytest.raises(TypeError):
            change(a.xattrs)
    assert a.xattrs == {} and len(a.xattrs) == 0
    for copied in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):
        assert copied == a and type(copied.xattrs) is dict
        copied.xattrs["k"] = b"v"
    assert replace(a, xattrs={"k": b"v"}).xattrs == {"k": b"v"} and b.xattrs == {}
    with_xattr = decode_entry(encode_entry(EntryInfo(address="a", xattrs={"k": b"v"})))
    assert type(with_xattr.xattrs) is dict and with_xattr.metadata is a.metadata


def test_a_lakefs_entry_without_mode_gets_its_kinds_default():
    """lakeFS writes no mode or kind: a regular file, 0644."""
    e = decode_entry(Entry(address="s3://b/k", size=3, address_type=2).SerializeToString())
    assert e.mode == stat.S_IFREG | 0o644 and e.kind == KIND_FILE and e.xattrs == {}


def test_an_atime_set_to_the_epoch_is_kept_apart_from_none_recorded():
    """utime(atime=0) is a time like any other (a found case: it showed as the mtime)."""
    unset = EntryInfo(mtime_ns=5)
    epoch = EntryInfo(mtime_ns=5, atime_ns=0)
    back = decode_entry(encode_entry(epoch))
    assert back.atime_ns == 0 and shown_atime(back) == 0 and shown_atime(unset) == 5
    assert decode_entry(encode_entry(unset)).atime_ns is None
    assert entry_identity(epoch) != entry_identity(unset)
    assert entry_identity(back) == entry_identity(epoch)


def test_times_outside_64_bit_nanoseconds_are_clamped():
    """ext4 keeps mtimes to 2446 and before 1901; gravfs records nanoseconds in 64 bits
    (1677-2262). An entry made with a time outside keeps the nearest one (the identity
    packed it and failed: "int too large to convert"), as a filesystem clamps times."""
    far = 15032385535 * 10**9  # 2446-05-10, an mtime ext4 keeps
    e = EntryInfo(address="data/x", size=1, mtime_ns=far, atime_ns=-far, ctime_ns=far)
    assert (e.mtime_ns, e.atime_ns, e.ctime_ns) == (TIME_NS_MAX, TIME_NS_MIN, TIME_NS_MAX)
    assert decode_entry(encode_entry(e)) == e
    assert entry_identity(e) == entry_identity(encode_entry(e))
    assert replace(e, mtime_ns=-far).mtime_ns == TIME_NS_MIN  # (a setattr through the mount)
    assert EntryInfo(mtime_ns=-1).mtime_ns == -1  # 1969: in range, kept


def test_same_but_times_tells_a_file_apart_only_by_what_is_not_a_time():
    """What a merge may take as one change written on both sides (merge.py)."""
    a = _old()
    assert same_but_times(encode_entry(a), encode_entry(replace(
        a, mtime_ns=5, atime_ns=7, ctime_ns=9)))
    for other in (replace(a, address="data/cd/cdef"), replace(a, size=12),
                  replace(a, mode=0o100600), replace(a, uid=7), replace(a, xattrs={}),
                  replace(a, link_group="g1", links=(b"x",)), replace(a, kind=KIND_FIFO)):
        assert not same_but_times(encode_entry(a), encode_entry(other)), other
