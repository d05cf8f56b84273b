"""Staged tokens as SlicedChanges (gravfs.version.staging.feed): whatever the token's
size, its neighbours in the table, long paths or the key a reader starts after,
the feed gives exactly what the per-entry layers give, here and in another process."""

from __future__ import annotations

import hashlib
import random
from itertools import chain

import pytest

from gravfs.errors import GravfsError
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed import BreakPolicy, CommittedManager
from gravfs.version.committed import writer as writer_mod
from gravfs.version.committed.record import encode_value, value_record_id
from gravfs.version.committed.sources import overrides_of
from gravfs.version.committed.workers import WorkerPool
from gravfs.version.staging import feed, view
from gravfs.version.staging.area import LONG_HEAD, PUT, PUT_ID, StagingArea, new_token


def value(i: int) -> bytes:
    return encode_value(bytes([i % 256]) * 32, b"data%d" % i)


def carried(changes: list[tuple]) -> list[tuple]:
    """The override entries one staged token gives: each put carries its record ID
    (hashed here, not read back), a deletion None."""
    return [o + (None if o[1] is None else value_record_id(o[0], o[1]),)
            for o in overrides_of(changes)]


def expected(area: StagingArea, tokens: list[str], after: bytes | None = None) -> list[tuple]:
    with area.read_txn() as txn:
        items = list(view.merged([view.RawTokenLayer(area, txn, t) for t in tokens]))
    return [c for c in items if after is None or c[0] > after]


def read(area: StagingArea, tokens: list[str], after: bytes | None = None) -> list[tuple]:
    return list(chain.from_iterable(feed.read_chunks(area, tuple(tokens), after)))


def remote_read(path: str, tokens: tuple[str, ...], overrides: bool,
                after: bytes | None) -> list[tuple]:
    """In a worker process: what a parallel commit's worker reads."""
    return list(chain.from_iterable(feed.read_path(path, tokens, overrides, after)))


@pytest.fixture
def area(tmp_path):
    a = StagingArea(str(tmp_path / "lmdb"))
    yield a
    a.close()


def test_tokens_of_every_size_read_whole_and_from_any_key(area):
    sizes = {"a": 0, "b": 1, "c": 63, "d": 64, "e": 65, "f": 5000, "g": 300, "h": 21000}
    for branch, n in sizes.items():
        items = [(b"%s/%06d" % (branch.encode(), i), None if i % 11 == 3 else value(i))
                 for i in range(n)]
        if items:
            area.put_many(branch, items, base="c0")
    for branch, n in sizes.items():
        tok = area.get_state(branch).staging
        want = expected(area, [tok])
        assert len(want) == n
        sc = feed.staged_changes(area, [tok])
        assert sc.keys == [c[0] for c in want]
        assert len(sc) == n and bool(sc) == bool(n)
        assert list(sc) == want, branch
        assert list(sc.overrides(None)) == carried(want), branch
        for at in (0, 1, 63, 64, 4999, n - 1):
            if 0 <= at < n:
                k = want[at][0]
                assert read(area, [tok], k) == want[at + 1:], (branch, at)
                assert list(sc.overrides(k)) == carried(want[at + 1:]), (branch, at)
                for x in (k + b"\x00", k[:-1]):  # not keys
                    assert read(area, [tok], x) == [c for c in want if c[0] > x]
    # deletions are kept as (key, None, None); puts keep their encoded value
    h = expected(area, [area.get_state("h").staging])
    assert h[3] == (b"h/000003", None, None)
    assert h[4] == (b"h/000004", bytes([4]) * 32, None, value(4))


def test_long_paths_come_in_path_order(area):
    """Paths over MAX_PLAIN_PATH are stored under hashed keys that sort apart from
    their paths: the feed reads them in path order, from any key on."""
    head = b"d/" + b"x" * (LONG_HEAD - 2)
    paths = [b"a/1", b"a/2", head, head + b"/short", head + b"0" * 30, head + b"/" + b"y" * 40,
             head + b"!" + b"z" * 40, b"zz/1", b"zz/2"]
    paths += [b"m/%05d" % i for i in range(200)]
    tok = new_token()
    area.put_token(tok, [(p, value(i)) for i, p in enumerate(paths)])
    want = expected(area, [tok])
    assert [c[0] for c in want] == sorted(paths)
    sc = feed.staged_changes(area, [tok])
    assert sc.keys == sorted(paths)
    assert list(sc) == want
    assert list(sc.overrides(None)) == carried(want)
    for i, c in enumerate(want):
        assert read(area, [tok], c[0]) == want[i + 1:], c[0][:20]
        assert list(sc.overrides(c[0])) == carried(want[i + 1:]), c[0][:20]


def test_newest_token_wins_and_provisional_puts_are_deletions(area):
    area.put_many("main", [(b"a", value(1)), (b"b", value(2)), (b"c", value(3))], base="c0")
    old = area.get_state("main").staging
    area.update_state("main", lambda s: (s.sealed.insert(0, s.staging), setattr(s, "staging", new_token())))
    area.put_many("main", [(b"b", None), (b"d", value(4)), (b"e", value(5))], base="c0",
                  provisional=frozenset([b"e"]))
    st = area.get_state("main")
    tokens = st.tokens()
    assert tokens[1] == old
    got = list(feed.staged_changes(area, tokens))
    assert got == expected(area, tokens)
    assert [(c[0], c[1] is not None) for c in got] == [
        (b"a", True), (b"b", False), (b"c", True), (b"d", True), (b"e", False)]
    assert read(area, tokens, b"b") == got[2:]
    assert feed.staged_changes(area, tokens).keys == [b"a", b"b", b"c", b"d", b"e"]
    assert list(feed.staged_changes(area, tokens).overrides(b"a")) == overrides_of(got[1:])


def test_a_worker_process_reads_the_same_changes(area):
    """Another process opens the database read-only and reads its slice itself, as
    override entries (what a commit's worker reads) or as changes."""
    tok = new_token()
    area.put_token(tok, [(b"k/%05d" % i, None if i % 7 == 0 else value(i)) for i in range(3000)])
    want = expected(area, [tok])
    sc = feed.staged_changes(area, [tok])
    path, tokens, _ = sc.remote.args
    pool = WorkerPool(1)
    try:
        got = pool.run([(remote_read, (*sc.remote.args, None)),
                        (remote_read, (*sc.remote.args, want[1999][0])),
                        (remote_read, (path, tokens, False, want[1999][0]))])
    finally:
        pool.close()
    assert got == [carried(want), carried(want[2000:]), want[2000:]]


def test_read_only_open_of_a_missing_database_says_so(tmp_path):
    with pytest.raises(GravfsError, match="cannot open staging database"):
        StagingArea(str(tmp_path / "nothing"), readonly=True)


@pytest.mark.parametrize("density,cache", [(0.0, False), (0.3, False), (0.3, True), (1.0, True)])
def test_record_ids_staging_carries_give_the_trees_of_hashing(tmp_path, monkeypatch, density,
                                                              cache):
    """A commit of staged puts takes the record IDs stored with them instead of hashing
    (three SHA-256 calls fewer a put), and builds the tree a commit of the same changes
    hashed from scratch builds: onto an empty base, into existing ranges (with their
    record IDs from the cache, or hashed), with puts of earlier versions (no record
    ID) and deletions among them."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 30, fsync=False)
    policy = BreakPolicy(0, 2048, 16, seed=3)
    staged = CommittedManager(store, tier, policy, workers=1,
                              record_ids_bytes=(1 << 30) if cache else 0)
    hashed = CommittedManager(store, tier, policy, workers=1, record_ids_bytes=0)
    area = StagingArea(str(tmp_path / "lmdb"))
    try:
        rng = random.Random(int(density * 10) + cache)
        keys = [b"d/%05d" % i for i in range(3000)]
        # written by the manager whose cache then holds the base ranges' record IDs
        base = staged.write_metarange([(k, hashlib.sha256(k).digest(), b"old") for k in keys
                                       if rng.random() < density])
        picked = sorted(rng.sample(keys, 1500))
        ch = [(k, None, None) if rng.random() < 0.1 and density
              else (k, hashlib.sha256(k + b"new").digest(), b"new %s" % k) for k in picked]
        tok = new_token()
        area.put_token(tok, [(k, None if i is None else encode_value(i, d)) for k, i, d in ch])
        older = [(k, PUT + encode_value(i, d)) for k, i, d in ch[::7] if i is not None]
        area.write(lambda txn: [area.put_entry(txn, bytes.fromhex(tok), k, raw)
                                for k, raw in older])
        with area.read_txn() as txn:
            tags = [raw[:1] for _, raw in area.iter_token(txn, tok)]
        assert tags.count(PUT) == len(older) and tags.count(PUT_ID) > 1000
        calls = []
        real = writer_mod._sha
        monkeypatch.setattr(writer_mod, "_sha", lambda *a: calls.append(1) or real(*a))
        got = staged.apply(base, feed.staged_changes(area, [tok])).metarange_id
        by_staged = len(calls)
        want = hashed.apply(base, ch).metarange_id
        assert got == want
        assert [r.id for r in staged.iter_ranges(got)] == [r.id for r in hashed.iter_ranges(want)]
        saved = len(calls) - by_staged - by_staged
        carried = tags.count(PUT_ID)
        if cache and density:  # the old records' IDs come from the cache too
            assert saved > 3 * carried
        else:
            assert saved == 3 * carried
    finally:
        area.close()
        staged.close()
        hashed.close()
