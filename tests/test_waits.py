"""Threads that must not wait: a stat runs where everything is at hand (ranges the
local tier holds are opened there), and gives way (WouldWait, nothing changed) where
it would read the store or fetch a range."""

from __future__ import annotations

import pytest

from gravfs.fs.entry import KIND_FILE, EntryInfo
from gravfs.fs.repository import Repository
from gravfs.waits import WouldWait, may_wait, no_waiting
from tests.repo_util import small_settings


def test_may_wait_raises_only_inside_no_waiting():
    may_wait("anything")
    with no_waiting():
        with pytest.raises(WouldWait, match="a range"):
            may_wait("a range")
    may_wait("anything")  # unmarked again, also after the raise


def test_stat_gives_way_until_its_head_and_ranges_are_at_hand(tmp_path):
    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"),
                           settings=small_settings())
    try:
        addr, size = repo.data.put_bytes(b"payload")
        items = [(b"d/f%04d" % i, EntryInfo(address=addr, size=size, mtime_ns=1, mode=0o100644,
                                             kind=KIND_FILE)) for i in range(2000)]
        repo.stage("main", items)
        c = repo.commit("main", "files")
        ranges = repo.committed.metarange(c.metarange).ids
        assert len(ranges) > 10  # d/f0005 and d/f1999 are in ranges of their own
    finally:
        repo.close()
    repo = Repository.open(str(tmp_path / "store"), str(tmp_path / "state"), head_ttl=60)
    try:
        with no_waiting():  # a fresh process: no head, commit or range yet
            with pytest.raises(WouldWait):
                repo.stat("main", "d/f0005")
        repo.commits.get(repo.head("main"))  # head and commit at hand, metarange not parsed
        with no_waiting():  # a metarange is parsed whole: never on a marked thread
            with pytest.raises(WouldWait, match="metaranges"):
                repo.stat("main", "d/f0005")
        assert repo.stat("main", "d/f0005").entry.size == size  # on a thread that may wait
        with no_waiting():  # the same range, now open: answered here
            assert repo.stat("main", "d/f0005").entry.size == size
            # another range, not open yet but in this workspace's tier (the commit
            # left its ranges there): opened here
            assert repo.stat("main", "d/f1999").entry.size == size
            repo.stage("main", [(b"d/new", EntryInfo(address=addr, size=size, kind=KIND_FILE,
                                                      mode=0o100644))])
            assert repo.stat("main", "d/new").entry.size == size  # staging is local: read here
    finally:
        repo.close()
    # a workspace whose tier holds nothing: a range must be fetched from the store
    repo = Repository.open(str(tmp_path / "store"), str(tmp_path / "other"), head_ttl=60)
    try:
        assert repo.stat("main", "d/f0005").entry.size == size  # head, commit, metarange
        fetches = repo.committed.tier.stats.fetches
        with no_waiting():
            with pytest.raises(WouldWait):  # its range is not in the tier
                repo.stat("main", "d/f1999")
        assert repo.committed.tier.stats.fetches == fetches  # gave way before fetching
        assert repo.stat("main", "d/f1999").entry.size == size
        with no_waiting():
            assert repo.stat("main", "d/f1999").entry.size == size
    finally:
        repo.close()
