"""Partitioned range writing: the stitched tree equals a single writer's, whatever the cuts."""

from __future__ import annotations

import random

import pytest

from gravfs.spark.ranges import stitch_partitions, write_partition
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed.breaks import BreakPolicy
from gravfs.version.committed.manager import CommittedManager
from gravfs.version.committed.record import encode_value
from gravfs.version.committed.results import Stats
from gravfs.version.committed.writer import TreeWriter, WriteContext

POLICIES = {
    "small": BreakPolicy(256, 2048, 8, seed=7),      # tests/repo_util.py SMALL_RANGES
    "min0": BreakPolicy(0, 4096, 16, seed=3),         # the lakeFS rule's shape
    "max-only": BreakPolicy(2048, 2048, 1 << 30),     # every break is a size break
}


def _records(n: int, rnd: random.Random) -> list[tuple[bytes, bytes, bytes]]:
    keys = sorted({f"d{rnd.randrange(50):02d}/f{rnd.randrange(10**6):07d}".encode()
                   for _ in range(n)})
    return [(k, rnd.randbytes(32), rnd.randbytes(rnd.randrange(10, 120))) for k in keys]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_partitioned_tree_equals_single_writer(tmp_path, policy):
    store = LocalStore(str(tmp_path / "store"))
    pol = POLICIES[policy]
    mgr = CommittedManager(store, LocalTier(store, str(tmp_path / "tier")), pol,
                           tmp_dir=str(tmp_path / "tmp"))
    rnd = random.Random(policy)
    recs = _records(3000, rnd)
    want = mgr.write_metarange(recs)
    assert len(mgr.metarange(want).ranges) > 30
    items = [(k, encode_value(i, d)) for k, i, d in recs]

    def writer() -> TreeWriter:
        ctx = WriteContext(store, str(tmp_path / "tmp"), None)
        return TreeWriter(ctx, pol, Stats())

    for nparts in (1, 2, 3, 7, 40):
        for trial in range(3):
            cuts = sorted(rnd.sample(range(1, len(items)), nparts - 1)) if nparts > 1 else []
            bounds = [0, *cuts, len(items)]
            # an empty partition in the middle, as a skewed range partitioner gives
            parts = [write_partition(writer(), i, items[a:b])
                     for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
            parts.insert(len(parts) // 2, write_partition(writer(), 99, []))
            got = stitch_partitions(writer(), mgr.ranges, parts)
            assert got.id == want, (policy, nparts, trial)
            assert got.ranges == mgr.metarange(want).ranges  # SST sizes too
    # tasks write no metarange of their own: the one tree's is the only one
    assert len(list(store.list("_gravfs/metaranges/"))) == 1
    mgr.close()
