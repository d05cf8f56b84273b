"""Ranges opened ahead of their first lookup (gravfs.version.committed.warmup)."""

from __future__ import annotations

import os

from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed import CommittedManager
from gravfs.version.committed.warmup import warm_ranges

from tests.version.test_committed_reader import TINY, make_manager, records


def counting_opens(m: CommittedManager) -> list:
    """The range IDs m's RangeStore parses from here on (a reader built without a state)."""
    seen = []
    new_reader = m.ranges._new_reader

    def spy(path, key, state=None, recover=None):
        if state is None:
            seen.append(key)
        return new_reader(path, key, state, recover)
    m.ranges._new_reader = spy
    return seen


def test_warm_opens_every_range_and_lookups_then_parse_none(tmp_path):
    m = make_manager(str(tmp_path))
    recs = records(3000)
    mid = m.write_metarange(recs)
    m.close()
    # the tier's copies, nothing parsed yet; room for every range whatever the descriptor
    # limit (its default cap, a quarter of it, was 256 under `ulimit -n 1024`)
    m = make_manager(str(tmp_path), max_open_ranges=1000)
    ranges = m.iter_ranges(mid)
    assert len(ranges) > 20
    assert warm_ranges(m.ranges, mid, 10_000) == (len(ranges), 0)
    assert set(m.ranges._ranges.keys()) == {r.id for r in ranges}
    parsed = counting_opens(m)
    for r in recs[::7]:
        assert m.get(mid, r.key) == r
    assert m.get(mid, b"t/05/f999999x") is None
    assert parsed == []  # every lookup found its range open
    m.close()


def test_warm_stops_at_its_limit_when_asked_and_when_readers_are_at_their_bound(tmp_path):
    m = make_manager(str(tmp_path), max_open_ranges=6)
    recs = records(3000)
    mid = m.write_metarange(recs)
    m.close()
    m = make_manager(str(tmp_path), max_open_ranges=6)
    ids = [r.id for r in m.iter_ranges(mid)]
    assert warm_ranges(m.ranges, mid, 3) == (3, 0)
    assert list(m.ranges._ranges.keys()) == ids[:3]  # key order
    assert warm_ranges(m.ranges, mid, 100, lambda: len(m.ranges._ranges) < 4) == (4, 0)
    assert len(m.ranges._ranges) == 4  # the three open already count, and one more
    assert warm_ranges(m.ranges, mid, 100, lambda: False) == (0, 0)  # stopped at once
    # a reader a lookup opened is not evicted for a guess: the warm-up stops at the bound
    last = recs[-1]
    assert m.get(mid, last.key) == last
    assert warm_ranges(m.ranges, mid, 100) == (5, 0)
    assert len(m.ranges._ranges) == 6 and ids[-1] in m.ranges._ranges
    m.close()


def test_warm_fetches_nothing_the_tier_does_not_hold(tmp_path):
    m = make_manager(str(tmp_path))
    recs = records(3000)
    mid = m.write_metarange(recs)
    m.close()
    store = LocalStore(os.path.join(str(tmp_path), "store"), fsync=False)
    tier = LocalTier(store, os.path.join(str(tmp_path), "other-cache"), 1 << 30, fsync=False)
    cold = CommittedManager(store, tier, TINY)
    n = len(cold.iter_ranges(mid))  # the metarange: fetched, as the first lookup would
    fetched = tier.stats.fetches
    assert warm_ranges(cold.ranges, mid, 10_000) == (0, n)
    assert tier.stats.fetches == fetched and len(cold.ranges._ranges) == 0
    assert cold.get(mid, recs[5].key) == recs[5]  # a lookup still fetches what it needs
    assert tier.stats.fetches == fetched + 1
    cold.close()
