"""Partitioned range writing: the stitched tree equals a single writer's, whatever the cuts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.spark.ranges import MAX_SHOWN, FileDirs, splice_tree, stitch_partitions, write_partition
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


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_spliced_tree_equals_single_writer(tmp_path, policy):
    """An import into branch:prefix read only at its seams gives the tree a single
    writer makes of the kept records and the imported ones: for a prefix at the
    start, in the middle and at the end of the head, absent from it, held as a file
    too, next to names that sort between ``prefix`` and ``prefix/``, and replacing
    ranges wholly inside it (which must not be read)."""
    store = LocalStore(str(tmp_path / "store"))
    pol = POLICIES[policy]
    mgr = CommittedManager(store, LocalTier(store, str(tmp_path / "tier")), pol,
                           tmp_dir=str(tmp_path / "tmp"))
    rnd = random.Random("splice" + policy)
    head_recs = _records(3000, rnd)
    extra = [(k.encode(), rnd.randbytes(32), b"x" * 20)
             for k in ("d10", "d10-a/x", "d10-a/y", "d10.z", "d49", "d49+/q")]
    head_recs = sorted(head_recs + extra)
    head = mgr.metarange(mgr.write_metarange(head_recs))
    assert len(head.ranges) > 30

    def writer() -> TreeWriter:
        return TreeWriter(WriteContext(store, str(tmp_path / "tmp"), None), pol, Stats())

    for prefix in (b"d00", b"d10", b"d25", b"d49", b"a", b"e", b"d10-a"):
        for n in (1, 40, 1500):
            names = {prefix + f"/t{rnd.randrange(10**6):07d}".encode() for _ in range(n)}
            tree_recs = [(k, rnd.randbytes(32), rnd.randbytes(rnd.randrange(10, 90)))
                         for k in sorted(names)]
            tree = mgr.metarange(mgr.write_metarange(tree_recs))
            lo, hi = prefix + b"/", prefix + b"0"
            kept = [r for r in head_recs if r[0] != prefix and not lo <= r[0] < hi]
            want = mgr.metarange(mgr.write_metarange(sorted(kept + tree_recs)))
            inside = {r.id for r in head.ranges if r.min_key >= lo and r.max_key < hi}
            read: list[str] = []
            real = mgr.ranges.range_items

            def spying(rid, *a, **kw):
                read.append(rid)
                return real(rid, *a, **kw)

            mgr.ranges.range_items = spying
            try:
                got = splice_tree(writer(), mgr.ranges, head, tree, prefix)
            finally:
                mgr.ranges.range_items = real
            assert got.id == want.id, (policy, prefix, n)
            assert not inside & set(read), (policy, prefix, n)
            if policy != "max-only":  # size breaks alone never line up again after a seam
                # the seams cost a few ranges, not the head or the tree
                assert len(set(read)) <= 12, (policy, prefix, n, len(read))
    mgr.close()


@settings(max_examples=300, deadline=None)
@given(st.sets(st.text("ab/-.0", min_size=1, max_size=7), max_size=40), st.data())
def test_file_and_directory_keys_found_across_partitions(names, data):
    """FileDirs over sorted keys cut into partitions, plus the lookup of each
    partition's pending files in the keys after it, finds exactly the keys that are
    a file and also hold ``key/...`` (brute force)."""
    keys = sorted(n.encode() for n in names)
    want = {k for k in keys if not k.endswith(b"/") and any(o.startswith(k + b"/") for o in keys)}
    cuts = sorted(data.draw(st.sets(st.integers(0, len(keys)), max_size=4)))
    bounds = [0, *cuts, len(keys)]
    found = FileDirs()
    for a, b in zip(bounds, bounds[1:]):
        part = FileDirs()
        part.feed(keys[a:b])
        assert len(part.pending) <= 8  # a chain of prefixes: as long as a key at most
        found.merge(part)
        later = keys[b:]
        for s in part.pending:
            if any(k.startswith(s + b"/") for k in later):
                found.found(s)
    assert found.count == len(want)
    if found.count <= MAX_SHOWN:
        assert set(found.shown) == want
