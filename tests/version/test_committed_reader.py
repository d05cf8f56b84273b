"""RangeStore caches: descriptor limit, LRU of open readers, parsed states by range ID,
and the warm lookup path of CommittedManager.get."""

from __future__ import annotations

import gc
import hashlib
import os
import random
import resource
import subprocess
import sys

import pytest

from gravfs.version.committed import BreakPolicy, CommittedManager, Record, encode_value
from gravfs.version.committed import reader as reader_mod
from gravfs.errors import CorruptDataError
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier

TINY = BreakPolicy(200, 2048, 8, seed=11)


def make_manager(root, **kw) -> CommittedManager:
    store = LocalStore(os.path.join(root, "store"), fsync=False)
    tier = LocalTier(store, os.path.join(root, "cache"), 1 << 30, fsync=False)
    return CommittedManager(store, tier, TINY, **kw)


def records(n: int, tag: bytes = b"") -> list[Record]:
    out = []
    for i in range(n):
        key = b"t/%02d/f%06d" % (i % 13, i)
        out.append(Record(key, hashlib.sha256(key + tag).digest(), b"payload-" + tag + key))
    return sorted(out)


def written_then_cold(root, n: int, max_open_ranges: int):
    """(writer, a second manager with a cold cache of 64 MiB, the records, the metarange
    ID): the records written by one manager, read by another."""
    m = make_manager(root, max_open_ranges=max_open_ranges, block_cache_bytes=64 << 20)
    recs = records(n)
    mid = m.write_metarange(recs)
    return m, make_manager(root, max_open_ranges=max_open_ranges,
                           block_cache_bytes=64 << 20), recs, mid


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_fd_soft_limit_raised_to_hard_limit(tmp_path):
    # In a fresh process with a low soft limit: making a RangeStore raises it.
    code = (
        "import resource, sys\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from gravfs.version.committed.reader import RangeStore\n"
        "class T: budget_bytes = 1 << 30\n"
        "rs = RangeStore(T())\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard, rs.max_open_ranges)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         check=True).stdout.split()
    soft, hard, max_open = (int(x) for x in out)
    if hard == resource.RLIM_INFINITY:
        assert soft > 256
    else:
        assert soft == hard
        assert max_open == max(64, min(4096, hard // 4))


def test_stores_on_the_default_cap_share_it(tmp_path):
    """Each store on the default cap kept a quarter of the descriptor limit open: a
    process holding a dozen (a Spark task's readers, a caller's repositories) ran out
    (EMFILE) under a limit of 256. They share the quarter now; one given a cap keeps it."""
    code = f"""
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
from tests.version.test_committed_reader import make_manager, records
from gravfs.version.committed.reader import MIN_SHARE
root = {str(tmp_path)!r}
m = make_manager(root)
recs = records(6000)
mid = m.write_metarange(recs)
ranges = len(m.ranges.metarange(mid))
assert ranges > 64, ranges
managers = [make_manager(root) for _ in range(11)]
assert m.ranges.max_open_ranges == max(MIN_SHARE, 64 // 12)
for x in managers:
    assert [r.key for r in x.iter(mid)] == [r.key for r in recs]
    for r in recs[::50]:
        assert x.get(mid, r.key) == r
own = make_manager(root, max_open_ranges=20)
assert own.ranges.max_open_ranges == 20
assert [r.key for r in own.iter(mid)] == [r.key for r in recs]
opened = sum(len(x.ranges._ranges) for x in managers + [m, own])
assert opened <= 12 * max(MIN_SHARE, 64 // 12) + 20, opened
for x in managers[:6]:
    x.close()
assert m.ranges.max_open_ranges == 64 // 6
print(ranges, opened, len(os.listdir("/proc/self/fd")))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def test_lru_closes_readers_and_reopened_ranges_read_correctly(tmp_path):
    m = make_manager(str(tmp_path), max_open_ranges=3)
    recs = records(4000)
    mid = m.write_metarange(recs)
    ranges = m.iter_ranges(mid)
    assert len(ranges) > 30
    gc.collect()
    fds = open_fds()
    rnd = random.Random(5)
    for _ in range(3):
        for r in rnd.sample(recs, 600):
            assert m.get(mid, r.key) == r
        assert m.get(mid, b"t/05/f999999x") is None
        assert m.get(mid, b"zzz") is None
        assert m.get(mid, b"") is None
        assert len(m.ranges._ranges) <= 3
    gc.collect()
    assert open_fds() - fds <= 3  # evicted readers closed their mmaps
    # Least recently used is closed first: a range used just now stays open.
    a, b = ranges[0].id, ranges[1].id
    oa = m.ranges.open_range(a)
    m.ranges.open_range(b)
    assert m.ranges.open_range(a) is oa
    for info in ranges[2:4]:
        m.ranges.open_range(info.id)
    assert a in m.ranges._ranges and b not in m.ranges._ranges
    # Reopening reuses the parsed state (index, cached blocks) kept by range ID.
    st = m.ranges.state(b)
    assert st is not None
    ob = m.ranges.open_range(b)
    assert ob.reader._state is st
    assert [x.key for x in m.range_records(b)] == [r.key for r in recs if ranges[1].min_key <= r.key <= ranges[1].max_key]
    assert list(m.iter(mid)) == recs
    m.close()


def test_tiny_budgets_with_many_states_evicted(tmp_path):
    m = make_manager(str(tmp_path), max_open_ranges=1, block_cache_bytes=16 << 10)
    m.ranges.max_states = 2
    recs = records(3000)
    mid = m.write_metarange(recs)
    m2 = make_manager(str(tmp_path), max_open_ranges=1, block_cache_bytes=16 << 10)
    m2.ranges.max_states = 2
    rnd = random.Random(9)
    for r in rnd.sample(recs, 1500):
        assert m2.get(mid, r.key) == r
        assert m2.get_value(mid, r.key) == encode_value(r.identity, r.data)
    assert len(m2.ranges._states) <= 2 and len(m2.ranges._ranges) <= 1
    assert m2.ranges.block_cache.used_bytes <= 16 << 10
    m.close()
    m2.close()


def test_get_decodes_every_value_shape(tmp_path):
    # The inlined decoder of get() takes 32-byte identities with 64..8191 bytes of data;
    # everything else goes through decode_record: all must agree with the records.
    m = make_manager(str(tmp_path))
    recs = []
    for i, (ilen, dlen) in enumerate([(0, 0), (32, 0), (32, 1), (32, 31), (32, 32), (32, 63),
                                      (32, 64), (32, 135), (32, 8191), (32, 8192), (32, 9000),
                                      (31, 100), (33, 100), (64, 100), (200, 5)]):
        key = b"k%03d" % i
        rnd = random.Random(i)
        recs.append(Record(key, rnd.randbytes(ilen), rnd.randbytes(dlen)))
    mid = m.write_metarange(recs)
    for _ in range(2):  # cold, then warm through the key maps
        for r in recs:
            assert m.get(mid, r.key) == r
    m.close()


def test_get_reports_corrupt_values(tmp_path):
    m = make_manager(str(tmp_path))
    mid = m.write_metarange(records(10))
    mr = m.metarange(mid)
    key = mr.min_keys[0]
    for bad in (b"", b"\x40" + b"x" * 10, b"\x40" + b"x" * 32 + b"\xc8\x01" + b"y" * 5):
        mr.kv_maps[0] = {key: bad}
        with pytest.raises(CorruptDataError):
            m.get(mid, key)
    m.close()


def test_state_outlives_reader_and_blocks_leave_cache_when_dropped(tmp_path):
    m, m2, recs, mid = written_then_cold(str(tmp_path), 2000, max_open_ranges=1)
    for r in recs:
        assert m2.get(mid, r.key) == r
    cache = m2.ranges.block_cache
    assert cache.used_bytes > 0
    # Readers were closed along the way, but warm lookups still hit the key maps.
    opened = []
    real_open = m2.ranges.open_range
    m2.ranges.open_range = lambda rid: opened.append(rid) or real_open(rid)
    for r in recs[::7]:
        assert m2.get(mid, r.key) == r
    assert opened == []
    m2.ranges.open_range = real_open
    m2.ranges._states.clear()
    m2.ranges._ranges.clear()
    m2.ranges._metaranges.clear()
    gc.collect()
    assert cache.used_bytes == 0
    assert m2.get(mid, recs[3].key) == recs[3]
    m.close()
    m2.close()


def test_scans_leave_the_block_cache_alone(tmp_path):
    """A listing or walk (CommittedManager.iter) decodes blocks without caching them,
    so it evicts nothing lookups reuse; lookups still fill the cache."""
    m, m2, recs, mid = written_then_cold(str(tmp_path), 3000, max_open_ranges=4)
    cache = m2.ranges.block_cache
    assert list(m2.iter(mid)) == recs
    assert list(m2.iter(mid, recs[1234].key)) == recs[1234:]
    assert cache.used_bytes == 0
    for r in recs[:50]:  # a block's second lookup decodes and caches it
        assert m2.get(mid, r.key) == r
    assert cache.used_bytes > 0
    m.close()
    m2.close()


def test_drop_parsed_lets_go_of_readers_states_and_their_blocks(tmp_path):
    m, m2, recs, mid = written_then_cold(str(tmp_path), 3000, max_open_ranges=64)
    for r in recs:
        assert m2.get(mid, r.key) == r
    rs, cache = m2.ranges, m2.ranges.block_cache
    assert len(rs._ranges) > 1 and len(rs._states) > 1 and cache.used_bytes > 0
    walk = m2.iter(mid)  # a scan under way keeps its reader
    first = next(walk)
    before = cache.used_bytes
    rs.drop_parsed()
    assert len(rs._ranges) == 0 and len(rs._states) == 0
    assert 0 < cache.used_bytes < before  # the walk's range keeps its blocks, for now
    assert [first] + list(walk) == recs
    assert cache.used_bytes == 0  # nothing holds the states any more
    assert m2.get(mid, recs[7].key) == recs[7]  # opened and parsed again
    m.close()
    m2.close()


def test_default_max_open_follows_limit(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert reader_mod._default_max_open() == 256
    monkeypatch.setattr(resource, "getrlimit", lambda _: (100000, 100000))
    assert reader_mod._default_max_open() == 4096
