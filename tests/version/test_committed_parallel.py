"""The parallel apply and merge (gravfs.version.committed.parallel) give exactly the
single-process result: same ranges (IDs, key spans, counts), same metarange ID.

Random trees and change sets on tiny break policies (so a few thousand keys
make 100+ ranges), with a minimum range size (breaks that do not realign at
once, so slices start out of step and the driver has to resume), forced
breaks (max_carry 1 and 2: the stitcher's state at a seam includes which
view is mid-range), changes before the first and after the last key, and
2 to 7 slices.  The managers share one store; the parallel one runs its
slices on two worker processes even for small change sets.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gravfs.errors import ConflictError
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed import BreakPolicy, CommittedManager, SizeAwareBreakPolicy
from gravfs.version.committed import parallel
from gravfs.version.committed.reader import range_key
from gravfs.version.committed.record import encode_value
from gravfs.version.committed.workers import WorkerPool
from gravfs.version.staging import feed
from gravfs.version.staging.area import StagingArea, new_token

UNIVERSE = 3000
POLICIES = {
    "lakefs-min": BreakPolicy(600, 3000, 4, seed=7),
    "lakefs-nomin": BreakPolicy(0, 2048, 16, seed=3),
    "size-aware": SizeAwareBreakPolicy(300, 2500, 600, seed=11),
}
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """(store, tier, {(policy, max_carry): (single-process manager, parallel manager)})."""
    root = str(tmp_path_factory.mktemp("committed-parallel"))
    store = LocalStore(os.path.join(root, "store"), fsync=False)
    tier = LocalTier(store, os.path.join(root, "cache"), 1 << 32, fsync=False)
    pairs = {}
    # dozens of managers in one process share the default cap on open ranges (under
    # `ulimit -n 1024` a quarter of the limit each ran out: EMFILE)
    for name, policy in POLICIES.items():
        for carry in (None, 1, 2, 8):
            one = CommittedManager(store, tier, policy, max_carry=carry, workers=1)
            two = CommittedManager(store, tier, policy, max_carry=carry, workers=2,
                                   parallel_min_ranges=1, parallel_min_records=1)
            pairs[name, carry] = (one, two)
    yield pairs
    for one, two in pairs.values():
        one.close()
        two.close()


def key(i: int) -> bytes:
    return b"d%d/k%05d" % (i % 4, i)


def value(k: bytes, version: int) -> tuple[bytes, bytes]:
    ident = hashlib.sha256(k + b"#%d" % version).digest()
    return ident, b"v%d-" % version + b"x" * (version * 13 % 90)


def tree(rng: random.Random, density: float) -> list[tuple]:
    return [(k, *value(k, 0)) for k in sorted(key(i) for i in range(UNIVERSE)
                                             if rng.random() < density)]


def changes(rng: random.Random, base: dict, n: int, version: int, puts: float) -> list[tuple]:
    idx = sorted(rng.sample(range(-50, UNIVERSE + 300), n))
    out = {}
    for i in idx:
        k = key(i) if i >= 0 else b"a/%05d" % -i          # before the first key
        if i >= UNIVERSE:
            k = b"z/%05d" % i                              # after the last key
        if rng.random() < puts or k not in base:
            out[k] = (k, *value(k, version))
        else:
            out[k] = (k, None, None)
    return [out[k] for k in sorted(out)]


def ranges(m: CommittedManager, mid: str) -> list[tuple]:
    return [(r.id, r.min_key, r.max_key, r.count) for r in m.iter_ranges(mid)]


params = st.tuples(st.sampled_from(sorted(POLICIES)), st.sampled_from([None, 1, 2, 8]),
                   st.integers(0, 2**32), st.integers(2, 7))


@SETTINGS
@given(params, st.floats(0.2, 1.0), st.integers(1, 400), st.floats(0.0, 1.0))
# found by this test: a run the driver resumed was taken for a slice's run
@example(("lakefs-nomin", None, 0, 4), 0.5, 12, 0.0)
def test_parallel_apply_equals_single_process(env, p, density, n, puts):
    name, carry, seed, slices = p
    one, two = env[name, carry]
    rng = random.Random(seed)
    recs = tree(rng, density)
    base = one.write_metarange(recs)
    ch = changes(rng, {r[0]: r for r in recs}, n, 1 + seed % 50, puts)
    two.slices = slices
    want = one.apply(base, ch).metarange_id
    got = two.apply(base, ch).metarange_id
    assert got == want
    assert ranges(two, got) == ranges(one, want)


@pytest.fixture(scope="module")
def staging(tmp_path_factory):
    area = StagingArea(str(tmp_path_factory.mktemp("staging")))
    yield area
    area.close()


@SETTINGS
@given(params, st.sampled_from([0.0, 0.05, 0.5, 1.0]), st.integers(1, 3000), st.floats(0.0, 1.0),
       st.booleans())
@example(("lakefs-min", None, 1, 4), 0.0, 3000, 1.0, False)  # a bulk load onto an empty tree
def test_parallel_apply_of_staged_changes_equals_single_process(env, staging, p, density, n,
                                                                puts, tail):
    """Changes the workers read from staging themselves (feed.py), sliced inside long
    stretches of new keys (an empty or sparse base, a load past its end), give the
    single-process tree."""
    name, carry, seed, slices = p
    one, two = env[name, carry]
    rng = random.Random(seed)
    recs = tree(rng, density)
    base = one.write_metarange(recs)
    by_key = {r[0]: r for r in recs}
    ch = changes(rng, by_key, min(n, UNIVERSE), 1 + seed % 50, puts)
    if tail:  # a new partition after every key
        ch += [(b"zz/%06d" % i, *value(b"zz/%06d" % i, 3)) for i in range(n)]
    tok = new_token()
    staging.put_token(tok, [(c[0], None if c[1] is None else encode_value(c[1], c[2]))
                            for c in ch])
    two.slices = slices
    want = one.apply(base, ch).metarange_id
    got = two.apply(base, feed.staged_changes(staging, [tok])).metarange_id
    assert got == want
    assert ranges(two, got) == ranges(one, want)


def test_cut_splits_a_stretch_of_new_keys():
    """A bulk load onto an empty tree is cut at its keys; onto a tree, at range ends
    unless new keys alone outweigh half a slice there."""
    from gravfs.version.committed.reader import MetaRange, RangeInfo
    keys = [b"k%04d" % i for i in range(1000)]
    empty = MetaRange("e", [])
    w = parallel.range_weights(empty, keys)
    assert w == [1000]
    assert parallel.cut(empty, w, 4, keys) == [
        (None, keys[249]), (keys[249], keys[499]), (keys[499], keys[749]), (keys[749], None)]
    assert parallel.cut(empty, w, 4) == [(None, None)]  # without keys: no range end to cut at
    tree_ = MetaRange("t", [RangeInfo("r%d" % i, b"k%04d" % (i * 100), b"k%04d" % (i * 100 + 99),
                                      100, 1) for i in range(10)])
    few = keys[5::100]  # one change in each range
    w = parallel.range_weights(tree_, few)
    assert w == [101] * 10 + [0]
    assert [hi for _, hi in parallel.cut(tree_, w, 2, few)] == [b"k0499", None]
    more = keys[:10] + [b"k9%05d" % i for i in range(3000)]  # and a long load past the end
    w = parallel.range_weights(tree_, more)
    assert w[0] == 110 and w[-1] == 3000
    bounds = [hi for _, hi in parallel.cut(tree_, w, 3, more)]
    assert bounds[0].startswith(b"k9") and bounds[1].startswith(b"k9") and bounds[2] is None


@SETTINGS
@given(params, st.integers(1, 300), st.integers(1, 300),
       st.sampled_from(["fail", "source-wins", "dest-wins"]))
def test_parallel_merge_equals_single_process(env, p, ns, nd, strategy):
    name, carry, seed, slices = p
    one, two = env[name, carry]
    rng = random.Random(seed)
    recs = tree(rng, 0.7)
    base = one.write_metarange(recs)
    by_key = {r[0]: r for r in recs}
    src = one.apply(base, changes(rng, by_key, ns, 2, 0.8)).metarange_id
    dst = one.apply(base, changes(rng, by_key, nd, 3, 0.8)).metarange_id
    two.slices = slices
    try:
        want = one.merge(base, src, dst, strategy)
    except ConflictError as e:
        with pytest.raises(ConflictError) as got:
            two.merge(base, src, dst, strategy)
        assert got.value.args == e.args
        return
    got = two.merge(base, src, dst, strategy)
    assert got.metarange_id == want.metarange_id
    assert got.conflicts == want.conflicts
    assert got.changes == want.changes
    assert (got.from_source, got.from_dest) == (want.from_source, want.from_dest)
    assert ranges(two, got.metarange_id) == ranges(one, want.metarange_id)


def test_join_runs_resumes_where_a_slice_started_out_of_step():
    """A slice whose recorded states miss the state its predecessor stopped at is
    bridged by the driver until a state a later slice recorded."""
    from gravfs.version.committed.reader import RangeInfo

    def info(n):
        return RangeInfo(f"r{n}", b"%d" % n, b"%d" % n, 1, 1)

    runs = [parallel.SliceRun([info(1), info(2)], {}, (b"2", ()), {}),
            parallel.SliceRun([info(9), info(3), info(4)], {(b"2x", ()): 1}, (b"4", ()), {}),
            parallel.SliceRun([info(5)], {(b"4", ()): 0}, None, {})]
    resumed = []

    def resume(state, stop):
        resumed.append(state)
        assert stop((b"2x", ())) and not stop((b"zz", ()))
        return parallel.SliceRun([info(8)], {}, (b"2x", ()), {})

    out = parallel.join_runs(runs, resume)
    assert resumed == [(b"2", ())]
    assert [r.id for r in out] == ["r1", "r2", "r8", "r3", "r4", "r5"]


def modules_loaded(names: list[str]) -> list[bool]:
    return [n in sys.modules for n in names]


def test_started_workers_have_preloaded_their_modules():
    pool = WorkerPool(2, preload=("gravfs.version.sstdump",))
    try:
        pool.start()  # returns at once: the processes start on their own
        assert len(pool._workers) == 2
        names = ["gravfs.version.sstdump", "gravfs.cli"]
        assert pool.run([(modules_loaded, (names,))] * 2) == [[True, False]] * 2
    finally:
        pool.close()


def test_worker_failure_is_raised_in_the_caller(tmp_path):
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 30, fsync=False)
    m = CommittedManager(store, tier, POLICIES["lakefs-nomin"], workers=2, parallel_min_ranges=1)
    try:
        recs = tree(random.Random(1), 1.0)
        base = m.write_metarange(recs)
        victim = m.iter_ranges(base)[len(m.iter_ranges(base)) // 2].id
        os.unlink(os.path.join(store.root, "_gravfs", "ranges", victim))
        os.unlink(tier._path(range_key(victim)))  # the copy kept when it was written
        m.ranges = type(m.ranges)(tier)  # forget what this process has open
        ch = [(r[0], *value(r[0], 5)) for r in recs[::7]]
        from gravfs.errors import NotFoundError
        with pytest.raises(NotFoundError):
            m.apply(base, ch)
    finally:
        m.close()


def test_record_id_cache_gives_the_same_trees_and_ignores_damaged_files(tmp_path):
    """Rewrites that take record IDs from the cache give the trees of rewrites that
    hash every record; a cache file that does not hash to its range is removed."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 30, fsync=False)
    policy = POLICIES["lakefs-min"]
    cached = CommittedManager(store, tier, policy, workers=1)
    plain = CommittedManager(store, tier, policy, workers=1, record_ids_bytes=0)
    try:
        rng = random.Random(5)
        recs = tree(rng, 0.9)
        base = cached.write_metarange(recs)
        ids = [r.id for r in cached.iter_ranges(base)]
        root = cached.record_ids.root
        assert all(os.path.exists(os.path.join(root, i[:2], i)) for i in ids)
        # damage one: wrong content of the right length
        victim = os.path.join(root, ids[3][:2], ids[3])
        with open(victim, "r+b") as f:
            f.write(b"\xff" * 32)
        ch = changes(rng, {r[0]: r for r in recs}, 60, 4, 0.7)
        assert cached.apply(base, ch).metarange_id == plain.apply(base, ch).metarange_id
        assert cached.record_ids.get(ids[3], cached.iter_ranges(base)[3].count) is None
        assert not os.path.exists(victim)
    finally:
        cached.close()
        plain.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_written_ranges_are_read_back_without_a_fetch(tmp_path, workers):
    """The ranges a commit writes, in this process or on its workers, stay in the
    tier as verified copies: the next apply reads them without fetching or verifying."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 32, fsync=False)
    policy = POLICIES["lakefs-nomin"]
    rng = random.Random(workers)
    with CommittedManager(store, tier, policy, workers=workers, parallel_min_ranges=1) as m:
        base = m.write_metarange(tree(rng, 0.9))
        first = m.apply(base, changes(rng, {}, 200, 1, 1.0)).metarange_id
        f0 = tier.stats.fetches
        second = m.apply(first, changes(rng, {}, 200, 2, 1.0)).metarange_id
        assert tier.stats.fetches == f0 == 0, "a range written here was fetched back"
    # The same trees, read through a fresh tier, are the ones written.
    fresh = LocalTier(store, str(tmp_path / "fresh"), 1 << 32, fsync=False)
    with CommittedManager(store, fresh, policy, workers=1) as one, \
            CommittedManager(store, tier, policy, workers=1) as again:
        assert list(one.iter(second)) == list(again.iter(second))
        assert fresh.stats.fetches > 0
        assert tier.stats.fetches == 0  # the workers' ranges too were adopted by this process
