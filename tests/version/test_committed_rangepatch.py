"""rangepatch: a range with a few changes is edited in place only where its end provably
stays, and then gives the very tree (same metarange and range IDs) streaming gives."""

from __future__ import annotations

import hashlib
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gravfs.sstable import SSTReader
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed import BreakPolicy, CommittedManager, Record
from gravfs.version.committed import stitch
from gravfs.version.committed.reader import range_key
from tests.sstable.support import rocksdb_items
from tests.version.test_committed_props import apply_model, as_changes

# ranges of ~60 records (records ~90 bytes): scattered changes leave most ranges'
# ends alone, and raggedness 16 puts hash-test hits below min_size in many ranges
POLICY = BreakPolicy(1500, 12_000, 16, seed=7)
UNIVERSE = 6000


def key(i: int) -> bytes:
    return b"t/p=%d/part-%05d.parquet" % (i % 7, i)


def record(k: bytes, version: int) -> Record:
    ident = hashlib.sha256(k + b"#%d" % version).digest()
    return Record(k, ident, b"v%d-" % version + b"x" * (version * 13 % 50))


@pytest.fixture(scope="module")
def mgr(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("rangepatch"))
    store = LocalStore(os.path.join(root, "store"), fsync=False)
    tier = LocalTier(store, os.path.join(root, "cache"), 1 << 32, fsync=False)
    m = CommittedManager(store, tier, POLICY, workers=1)
    yield m
    m.close()


def _changes(rng: random.Random, base: dict, n: int) -> dict:
    out = {}
    for _ in range(n):
        k = key(rng.randrange(UNIVERSE))
        r = rng.random()
        out[k] = None if r < 0.3 else record(k, 1 + rng.randrange(4))
    return out


def _streamed(mgr, monkeypatch, base_id, changes):
    with monkeypatch.context() as mp:
        mp.setattr(stitch, "_patched", lambda *a: False)
        return mgr.apply(base_id, changes)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 3, 10, 40, 200]),
       rounds=st.integers(1, 3))
def test_patched_apply_gives_the_streamed_tree(mgr, monkeypatch, seed, n, rounds):
    rng = random.Random(seed)
    model = {key(i): record(key(i), 0) for i in range(UNIVERSE) if rng.random() < 0.8}
    tree = mgr.write_metarange([model[k] for k in sorted(model)])
    for _ in range(rounds):  # patched ranges are patched again (their facts carried over)
        changes = _changes(rng, model, n)
        streamed = _streamed(mgr, monkeypatch, tree, as_changes(changes))
        res = mgr.apply(tree, as_changes(changes))
        model = apply_model(model, changes)
        assert res.metarange_id == streamed.metarange_id
        assert list(mgr.iter(res.metarange_id)) == [model[k] for k in sorted(model)]
        assert res.stats.ranges_patched <= res.stats.ranges_written
        tree = res.metarange_id


def test_scattered_changes_patch_most_ranges_and_rocksdb_reads_them(mgr, monkeypatch):
    model = {key(i): record(key(i), 0) for i in range(UNIVERSE)}
    tree = mgr.write_metarange([model[k] for k in sorted(model)])
    n_ranges = len(mgr.iter_ranges(tree))
    ks = sorted(model)
    # one changed value per range, in place: every range keeps its end
    changes = {k: record(k, 2) for k in ks[5::len(ks) // n_ranges]}
    res = mgr.apply(tree, as_changes(changes))
    assert res.stats.ranges_patched >= 0.8 * len(changes), res.stats
    assert res.metarange_id == _streamed(mgr, monkeypatch, tree, as_changes(changes)).metarange_id
    model = apply_model(model, changes)
    new_ranges = mgr.iter_ranges(res.metarange_id)
    old_ids = {r.id for r in mgr.iter_ranges(tree)}
    patched = [r for r in new_ranges if r.id not in old_ids]
    for r in patched[:5]:
        with mgr.tier.acquire(range_key(r.id)) as h:
            path = h.path
            with SSTReader(path) as sst:
                got = list(sst)
                sst.verify()
                assert sst.user_properties["count"] == str(r.count).encode()
            assert rocksdb_items(path) == got
        assert [k for k, _ in got] == [k for k in ks if r.min_key <= k <= r.max_key]


def test_a_change_that_moves_a_range_end_is_streamed(mgr, monkeypatch):
    model = {key(i): record(key(i), 0) for i in range(UNIVERSE)}
    tree = mgr.write_metarange([model[k] for k in sorted(model)])
    ranges = mgr.iter_ranges(tree)
    r = ranges[len(ranges) // 2]
    # deleting a range's last record moves its end: never patched
    res = mgr.apply(tree, [(r.max_key, None, None)])
    assert res.stats.ranges_patched == 0
    assert res.metarange_id == _streamed(mgr, monkeypatch, tree, [(r.max_key, None, None)]).metarange_id
    # a record grown past max_size's reach moves it too
    big = Record(r.min_key, hashlib.sha256(b"big").digest(), b"y" * POLICY.max_size)
    res = mgr.apply(tree, [big])
    assert res.stats.ranges_patched == 0
    assert res.metarange_id == _streamed(mgr, monkeypatch, tree, [big]).metarange_id


def test_patches_outlive_the_readers_they_copy_from(tmp_path, monkeypatch):
    """One open reader at a time: each range's reader is evicted (and its file
    unmapped) as the next opens, while upload threads still copy its blocks."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 32, fsync=False)
    m = CommittedManager(store, tier, POLICY, workers=1, max_open_ranges=1, upload_threads=2)
    try:
        model = {key(i): record(key(i), 0) for i in range(UNIVERSE)}
        tree = m.write_metarange([model[k] for k in sorted(model)])
        ks = sorted(model)
        changes = as_changes({k: record(k, 3) for k in ks[7::40]})
        res = m.apply(tree, changes)
        assert res.stats.ranges_patched > 50
        assert res.metarange_id == _streamed(m, monkeypatch, tree, changes).metarange_id
    finally:
        m.close()
