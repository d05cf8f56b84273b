"""The mount's branch stat cache and own-write log, without a mount."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gravfs.fs.entry import KIND_FILE, EntryInfo
from gravfs.fuse.statcache import MISSING, BranchStatCache, OwnWrites
from gravfs.fs.repository import Repository


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def repos(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state).close()
    mine = Repository.open(store, state, head_ttl=60.0, staging_sync=False)

    def other_stage(key: str, size: int) -> None:
        """Stage from another process on the same workspace."""
        code = ("import sys, time; from gravfs.fs.repository import Repository;"
                "from gravfs.fs.entry import EntryInfo, KIND_FILE;"
                "r = Repository.open(sys.argv[1], sys.argv[2]);"
                "r.stage('main', [(sys.argv[3].encode(), EntryInfo(address='data/00/' + '0' * 64,"
                " size=int(sys.argv[4]), mtime_ns=time.time_ns(), mode=0o100644, kind=KIND_FILE))]);"
                "r.close()")
        subprocess.run([sys.executable, "-c", code, store, state, key, str(size)], check=True,
                       env=dict(os.environ, PYTHONPATH=ROOT))

    yield mine, other_stage
    mine.close()


def _entry(size: int) -> EntryInfo:
    return EntryInfo(address="data/00/" + "0" * 64, size=size, mtime_ns=time.time_ns(),
                     mode=0o100644, kind=KIND_FILE)


def _stat(repo, key):
    try:
        return repo.stat("main", key)
    except Exception:
        return None


def test_own_writes_drop_only_their_keys(repos):
    repo, _ = repos
    own = OwnWrites()
    own.wrap(repo.staging)
    cache = BranchStatCache(repo, own)
    repo.stage("main", [(b"d/a", _entry(1)), (b"d/b", _entry(2))])
    v = cache.version("main", blocking=True)
    for k in (b"d/a", b"d/b", b"d"):
        cache.put("main", v, k, _stat(repo, k))
    cache.put_listing("main", v, b"d", {b"a", b"b"})
    assert cache.get("main", v, b"d/zz") is None  # complete directory: known missing
    own.collect("main", [(b"d/a", True), (b"d/c", True)], repo.stage, "main",
                [(b"d/a", _entry(10)), (b"d/c", _entry(3))])
    v2 = cache.version("main", blocking=False)
    assert v2[1] > v[1]
    assert cache.get("main", v2, b"d/a") is MISSING  # changed by us: read again
    assert cache.get("main", v2, b"d/c") is MISSING  # new name in the complete directory
    assert cache.get("main", v2, b"d/b").entry.size == 2  # untouched: still cached
    assert cache.get("main", v2, b"d").kind == "dir"  # a directory stays one
    assert cache.get("main", v2, b"d/zz") is None
    # a result read before our write cannot be filed over the newer version
    cache.put("main", v, b"d/a", _stat(repo, b"d/a"))
    assert cache.get("main", v2, b"d/a") is MISSING


def test_foreign_writes_end_the_cached_version(repos):
    repo, other = repos
    own = OwnWrites()
    own.wrap(repo.staging)
    cache = BranchStatCache(repo, own)
    repo.stage("main", [(b"f", _entry(1))])
    v = cache.version("main", blocking=True)
    cache.put("main", v, b"f", _stat(repo, b"f"))
    cache.put_listing("main", v, b"", {b"f"})
    cache.put_listed("main", v, b"", repo.list_dir("main", b"", None, 100))  # not filed yet
    start = v[1]
    other("g", 5)
    v2 = cache.version("main", blocking=False)
    assert cache.get("main", v2, b"f") is MISSING
    assert cache.get("main", v2, b"g") is MISSING  # no longer "known missing"
    cache.put("main", v2, b"g", _stat(repo, b"g"))  # the cache starts over at v2
    assert cache.get("main", v2, b"f") is MISSING  # not from the batch listed at v
    assert own.foreign_since(start, v2[1])
    own.collect("main", [(b"h", True)], repo.stage, "main", [(b"h", _entry(1))])
    v3 = cache.version("main", blocking=False)
    assert not own.foreign_since(v2[1], v3[1])


def test_changes_the_mount_did_not_make_are_dated(repos):
    """changed_at: when the branch last moved by a write that was not the mount's
    own (noticed across drop(), which forgets the results, not the version seen)."""
    repo, other = repos
    own = OwnWrites()
    own.wrap(repo.staging)
    cache = BranchStatCache(repo, own)
    repo.stage("main", [(b"f", _entry(1))])  # before the cache saw a version
    v = cache.version("main", blocking=True)
    cache.put("main", v, b"f", _stat(repo, b"f"))
    own.collect("main", [(b"f", True)], repo.stage, "main", [(b"f", _entry(2))])
    v2 = cache.version("main", blocking=False)
    assert cache.get("main", v2, b"f") is MISSING
    cache.put("main", v2, b"f", _stat(repo, b"f"))
    repo.stage("main", [(b"f", _entry(3))])  # ours, noted, not filed (as while collect runs)
    v3 = cache.version("main", blocking=False)
    cache.put("main", v3, b"f", _stat(repo, b"f"))
    assert cache.changed_at("main") == 0.0
    cache.drop()
    before = time.monotonic()
    other("g", 5)
    v4 = cache.version("main", blocking=False)
    cache.put("main", v4, b"g", _stat(repo, b"g"))
    assert cache.changed_at("main") >= before


def test_removals_forget_implied_directories(repos):
    repo, _ = repos
    own = OwnWrites()
    own.wrap(repo.staging)
    cache = BranchStatCache(repo, own)
    repo.stage("main", [(b"x/y/z", _entry(1))])
    v = cache.version("main", blocking=True)
    for k in (b"x", b"x/y", b"x/y/z"):
        cache.put("main", v, k, _stat(repo, k))
    assert cache.get("main", v, b"x/y").entry is None  # implied by its file
    own.collect("main", [(b"x/y/z", False)], repo.stage, "main", [(b"x/y/z", None)])
    v2 = cache.version("main", blocking=False)
    for k in (b"x", b"x/y", b"x/y/z"):
        assert cache.get("main", v2, k) is MISSING, k
    assert _stat(repo, b"x") is None


def test_a_listed_batch_answers_lookups_in_its_directory(repos):
    """put_listed keeps a readdir batch as listed: its files answer under the names the
    mount shows (escaped for another writer's), its directories do not (stat them), a
    whole listing makes the directory complete, and a later result wins over it."""
    repo, _ = repos
    cache = BranchStatCache(repo, OwnWrites())
    repo.stage("main", [(b"d/a", _entry(1)), (b"d//x", _entry(2)), (b"d/sub/y", _entry(3))])
    v = cache.version("main", blocking=True)
    batch = repo.list_dir("main", b"d", None, 100)
    assert [n.fs_name for n in batch] == [b"%2Fx", b"a", b"sub"]
    cache.put_listed("main", v, b"d", batch, whole=True)
    assert cache.get("main", v, b"d/a") is batch[1]
    assert cache.get("main", v, b"d/%2Fx") is batch[0]
    assert cache.get("main", v, b"d/sub") is MISSING  # a directory: stat it
    assert cache.get("main", v, b"d/nope") is None  # the whole directory was listed
    newer = _stat(repo, b"d/a")
    cache.put("main", v, b"d/a", newer)
    assert cache.get("main", v, b"d/a") is newer
    repo.stage("main", [(b"e/x", _entry(4)), (b"e/y", _entry(5))])
    v = cache.version("main", blocking=True)
    cache.put_listed("main", v, b"e", repo.list_dir("main", b"e", None, 1))  # a part
    direct = _stat(repo, b"e/x")
    cache.put("main", v, b"e/x", direct)  # before the batch was filed: stays
    assert cache.get("main", v, b"e/x") is direct
    assert cache.get("main", v, b"e/y") is MISSING  # not listed, and not complete


def test_own_writes_drop_what_a_listed_batch_said(repos):
    repo, _ = repos
    own = OwnWrites()
    own.wrap(repo.staging)
    cache = BranchStatCache(repo, own)
    repo.stage("main", [(b"d/a", _entry(1)), (b"d/b", _entry(2)), (b"x", _entry(4)),
                        (b"e/f", _entry(5))])
    v = cache.version("main", blocking=True)
    for d in (b"", b"d", b"e"):
        cache.put_listed("main", v, d, repo.list_dir("main", d, None, 100), whole=True)
    own.collect("main", [(b"d/a", True), (b"d/c", True), (b"x/y", True)], repo.stage, "main",
                [(b"d/a", _entry(10)), (b"d/c", _entry(3)), (b"x/y", _entry(6))])
    v2 = cache.version("main", blocking=False)
    assert cache.get("main", v2, b"d/a") is MISSING  # staged since the listing
    assert cache._unfiled_names["main"] == 1  # e's batch: no write below it, not filed
    assert cache.get("main", v2, b"d/c") is MISSING  # new in the complete directory
    assert cache.get("main", v2, b"x") is MISSING  # a file that became a directory too
    assert cache.get("main", v2, b"d/b").entry.size == 2
    assert cache.get("main", v2, b"d/zz") is None
    assert cache.get("main", v2, b"e/f").entry.size == 5


def test_listed_batches_stay_bounded_and_are_filed_as_asked(repos):
    """Past the bound the batches listed first are forgotten (of one long directory
    too: its newest stay); a lookup files a directory's batches in order until its
    name is found."""
    repo, _ = repos
    cache = BranchStatCache(repo, OwnWrites(), max_entries=100)
    repo.stage("main", [(b"a/f%03d" % i, _entry(i)) for i in range(20)]
               + [(b"b/f%03d" % i, _entry(i)) for i in range(120)])
    v = cache.version("main", blocking=True)
    cache.put_listed("main", v, b"a", repo.list_dir("main", b"a", None, 100), whole=True)
    after = None
    for _ in range(4):
        batch = repo.list_dir("main", b"b", after, 30)
        cache.put_listed("main", v, b"b", batch)
        after = batch[-1].listing_key
    assert cache._unfiled_names["main"] == 90  # a's batch and b's first went
    assert cache.get("main", v, b"b/f045").entry.size == 45  # b's newest batches stay
    assert cache._unfiled_names["main"] == 60  # that one batch was filed, not the others
    assert cache.get("main", v, b"b/f119").entry.size == 119
    assert cache._unfiled_names["main"] == 0
    assert cache.get("main", v, b"b/f029") is MISSING
    assert cache.get("main", v, b"a/f000") is MISSING
    assert cache.get("main", v, b"a/zzz") is MISSING  # (no longer known complete)


def test_results_filed_at_once_stay_bounded(repos):
    """put_many files results under one version; past the bound the oldest go and the
    newest stay."""
    repo, _ = repos
    cache = BranchStatCache(repo, OwnWrites(), max_entries=100)
    repo.stage("main", [(b"d/a", _entry(1))])
    v = cache.version("main", blocking=True)
    node = _stat(repo, b"d/a")
    cache.put_many("main", v, [(b"d/f%03d" % i, node) for i in range(90)])
    assert cache.get("main", v, b"d/f000") is node
    cache.put_many("main", v, [(b"d/g%03d" % i, node) for i in range(40)])
    assert cache.get("main", v, b"d/g039") is node and cache.get("main", v, b"d/f089") is node
    assert cache.get("main", v, b"d/f000") is MISSING
    assert len(cache._nodes["main"]) <= 100
