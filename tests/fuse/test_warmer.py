"""The mount opens its branch's ranges in the background while idle (gravfs.fuse.warmer)."""

from __future__ import annotations

import os
import re
import threading
import time

from gravfs.fs.entry import KIND_FILE, EntryInfo
from gravfs.fs.repository import Repository
from gravfs.fuse.spin import ACTIVITY
from gravfs.fuse.warmer import QUIET_S, RangeWarmer
from gravfs.version.committed.reader import _default_max_open

from tests.fuse_util import Mount, fuse_available, wait_for
from tests.repo_util import head_metarange, small_settings

WARMED = re.compile(r"opened (\d+) ranges of branch main ahead of lookups")


def test_the_mount_opens_its_branch_ranges_once_ready_unless_told_not_to(tmp_path):
    assert fuse_available(), "/dev/fuse is not usable: these tests need real FUSE mounts"
    m = Mount(str(tmp_path))
    repo = Repository.init(m.store, m.state_dir, settings=small_settings())
    try:
        address, size = repo.data.put_bytes(b"x")
        e = EntryInfo(address=address, size=size, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
        repo.stage("main", [(b"d/f%05d" % i, e) for i in range(2000)])
        repo.commit("main", "many ranges")
        n = len(repo.committed.iter_ranges(head_metarange(repo, "main")))
    finally:
        repo.close()
    assert n > 20
    try:
        m.mount()
        found = wait_for(lambda: WARMED.search(m.log_text()))
        # the daemon opens at most its cap, a quarter of the descriptor limit (256 under
        # `ulimit -n 1024`, which the daemon inherits from here)
        assert int(found.group(1)) == min(n, _default_max_open()), m.log_tail()
        assert os.stat(m.branch_path("d", "f01234")).st_size == 1
        m.umount()
        m.mount(options=["warm_ranges=0"])
        assert os.stat(m.branch_path("d", "f01999")).st_size == 1
        m.umount()
        assert len(WARMED.findall(m.log_text())) == 1  # the second mount warmed nothing
        m.assert_clean_log()
    finally:
        m.cleanup()


def test_the_warm_up_waits_for_a_pause_in_requests_and_stops_at_unmount():
    w = RangeWarmer(repo=None, branch="main", limit=10)
    w._seen = ACTIVITY.count
    assert w._between() and w.waits == 0  # no request since: go on at once
    stop_at = time.monotonic() + 0.3
    requests = threading.Thread(target=_requests_until, args=(stop_at,))
    requests.start()
    try:
        time.sleep(0.05)
        assert w._between()
        assert time.monotonic() >= stop_at  # not while they came
        assert w.waits >= 2  # (about 0.25 / QUIET_S of them)
    finally:
        requests.join()
    w.stop()
    ACTIVITY.count += 1
    assert not w._between()  # unmounting: no wait, no more ranges


def _requests_until(deadline: float) -> None:
    while time.monotonic() < deadline:
        ACTIVITY.count += 1  # (what each metadata request's note does)
        time.sleep(0.002)
