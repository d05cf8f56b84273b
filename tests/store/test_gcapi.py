"""The store API garbage collection uses: stat, listing with metadata, touch, batch
delete, and the reuse claim writers make (refresh an old object; during a sweep,
wait out the sweep's lease and look again). LocalStore and S3Store (SeaweedFS)."""

from __future__ import annotations

import os
import time

import pytest

from gravfs.store import base
from gravfs.store.local import LocalStore

DAY = 86400.0


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    return request.getfixturevalue("s3_store")


def test_stat_list_info_touch_delete_many(store):
    before = time.time()
    keys = [f"data/{i:02x}/obj{i}" for i in range(5)] + ["data/ab/other"]
    for i, k in enumerate(keys):
        store.put(k, b"x" * i)
    info = store.stat("data/03/obj3")
    assert info.key == "data/03/obj3" and info.size == 3
    assert before - 5 <= info.mtime <= time.time() + 5
    assert store.stat("data/03/missing") is None
    got = {i.key: i.size for i in store.list_info("data/0")}
    assert got == {k: i for i, k in enumerate(keys[:5])}
    assert {i.key for i in store.list_info("data/")} == set(keys)
    assert store.touch("data/03/obj3") is True
    assert store.touch("data/03/missing") is False
    assert store.stat("data/03/obj3").mtime >= info.mtime
    assert store.delete_many(keys[:4] + ["data/77/never"]) == 5
    assert {i.key for i in store.list_info("data/")} == {keys[4], keys[5]}


@pytest.mark.s3
def test_s3_delete_many_more_than_one_request(s3_store):
    keys = [f"data/{i % 7:02x}/k{i:05d}" for i in range(2300)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3_store.put(k, b"."), keys))
    assert sum(1 for _ in s3_store.list_info("data/")) == 2300
    s3_store.delete_many(keys[:2200])
    assert sorted(i.key for i in s3_store.list_info("data/")) == sorted(keys[2200:])


def _age(store: LocalStore, key: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(store._path(key), (t, t))


def test_reusing_an_old_object_refreshes_it(tmp_path):
    s = LocalStore(str(tmp_path / "s"))
    s.put("data/aa/old", b"1")
    s.put("_gravfs/refs/tags/t", b"1")
    _age(s, "data/aa/old", 2 * DAY)
    _age(s, "_gravfs/refs/tags/t", 2 * DAY)
    assert s.claim_existing("data/aa/old")
    assert time.time() - s.stat("data/aa/old").mtime < 60
    _age(s, "data/aa/old", 2 * DAY)
    assert s.put_if_absent("data/aa/old", b"1") is False  # exists: claimed, refreshed
    assert time.time() - s.stat("data/aa/old").mtime < 60
    assert s.put_if_absent("_gravfs/refs/tags/t", b"2") is False  # not GC's: left alone
    assert time.time() - s.stat("_gravfs/refs/tags/t").mtime > DAY
    assert s.claim_existing("data/aa/missing") is False


class _SweptOnTouch(LocalStore):
    """A sweep that listed the object before the writer's touch deletes it just after."""

    def touch(self, key: str) -> bool:
        ok = super().touch(key)
        self.delete(key)
        return ok


def test_claim_during_a_sweep_waits_the_lease_and_sees_the_delete(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAVFS_GC_LEASE", "0.2")
    s = _SweptOnTouch(str(tmp_path / "s"))
    s.put("data/aa/obj", b"content")
    _age(s, "data/aa/obj", 2 * DAY)
    # no sweep running: the touch is enough (a later sweep lists the fresh time)
    assert s.claim_existing("data/aa/obj") is True
    s.put("data/aa/obj", b"content")
    _age(s, "data/aa/obj", 2 * DAY)
    LocalStore.put(s, base.SWEEP_FENCE, b"{}")
    t0 = time.monotonic()
    assert s.claim_existing("data/aa/obj") is False  # gone: the writer must write it
    assert time.monotonic() - t0 >= 0.2
    s.put("data/aa/obj", b"content")
    _age(s, "data/aa/obj", 2 * DAY)
    assert s.put_if_absent("data/aa/obj", b"content") is True  # written again
    assert s.get("data/aa/obj") == b"content"


def test_a_lease_below_the_minimum_is_raised_to_it(monkeypatch):
    """A lease of 0 made the sweep list its prefixes again forever, never deleting."""
    monkeypatch.setenv("GRAVFS_GC_LEASE", "0")
    assert base.sweep_lease() == base.MIN_LEASE
    monkeypatch.setenv("GRAVFS_GC_LEASE", "45")
    assert base.sweep_lease() == 45.0
