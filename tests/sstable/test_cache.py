"""The block cache: releases that cannot wait for its lock."""

from __future__ import annotations

import pytest

from gravfs.sstable import BlockCache, SSTReader
from tests.sstable.support import make_items, rocksdict_sst


@pytest.mark.timeout(60)
def test_release_inside_a_locked_section_is_queued_not_deadlocked(tmp_path):
    """A reader state's finalizer may run from an allocation inside the cache's own
    locked section (the garbage collector): its release must not wait for the lock."""
    cache = BlockCache()
    p1 = rocksdict_sst(str(tmp_path / "1.sst"), make_items(3000, prefix=b"a/"))
    p2 = rocksdict_sst(str(tmp_path / "2.sst"), make_items(3000, prefix=b"b/"))
    r1 = SSTReader(p1, cache=cache)
    list(r1)
    used1 = cache.used_bytes
    assert used1 > 0
    with cache._lock:  # as admit() holds it when the collector runs a finalizer
        r1.close()  # the owner's release
    assert cache.used_bytes == used1  # queued
    with SSTReader(p2, cache=cache) as r2:
        for _ in range(2):  # the second lookup in a block decodes and admits it,
            assert r2.get(b"b/" + b"%07d" % 5) is not None  # which drains the queue
        assert 0 < cache.used_bytes < used1
    assert cache.used_bytes == 0

