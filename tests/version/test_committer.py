"""Crash safety of commit: kill the committing process at every step.

Each case stages files, runs `gravfs commit` in a subprocess that dies (like
kill -9) at a named point, then checks: the branch is at the old or the new
commit, every staged change is still visible, fsck is clean, and a retry
lands everything.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from gravfs.faults import CRASH_EXIT_CODE, CRASH_POINTS
from gravfs.fs.repository import Repository
from tests.repo_util import run_cli, small_settings

# every step of a commit (gravfs/faults.py); tests/test_faults.py walks all points
POINTS = [p for p in CRASH_POINTS if p.startswith("commit:")]


def _setup(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    for i in range(40):
        r.write_file("main", f"base/{i:03d}", b"b%d" % i)
    r.commit("main", "base")
    for i in range(0, 40, 3):
        r.write_file("main", f"base/{i:03d}", b"changed%d" % i)
    r.remove("main", "base/001")
    r.write_file("main", "new/file", b"new")
    head = r.head("main")
    want = {n.path: r.read(n) for n in r.walk("main") if n.kind == "file"}
    r.close()
    return store, state, head, want


def _files(repo, ref):
    return {n.path: repo.read(n) for n in repo.walk(ref) if n.kind == "file"}


@pytest.mark.parametrize("point", POINTS)
def test_commit_killed_at_point(tmp_path, point):
    store, state, old_head, want = _setup(tmp_path)
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, GRAVFS_CRASH_AT=point)
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "commit", "main", "-m", "crashy"],
                       env=env, capture_output=True, timeout=120)
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    r = Repository.open(store, state)
    head = r.head("main")
    landed = head != old_head
    assert landed == (point == "commit:head-moved")
    assert _files(r, "main") == want  # nothing acknowledged is lost, nothing half-applied
    if landed:
        assert _files(r, head) == want
    r.close()
    _, out, _ = run_cli("fsck", store=store, state=state)
    assert "clean" in out
    rc, out, err = run_cli("commit", "main", "-m", "retry", store=store, state=state, check=False)
    if landed:
        assert rc == 1 and "nothing to commit" in err
    else:
        assert rc == 0, err
    r = Repository.open(store, state)
    assert _files(r, r.head("main")) == want
    assert r.status("main") == []
    r.close()


def test_commit_killed_by_signal_at_random_times(tmp_path):
    """A real SIGKILL at varying delays during a larger commit."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    from gravfs.fs.entry import EntryInfo
    addr, size = r.data.put_bytes(b"x")
    for round_ in range(6):
        r.stage("main", [(f"r{round_}/{i:05d}".encode(), EntryInfo(address=addr, size=size, mtime_ns=1))
                         for i in range(3000)])
        want = {n.path for n in r.walk("main")}
        env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
        proc = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "commit", "main", "-m", "k"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3 + 0.25 * round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        r.close()
        r = Repository.open(store, state)
        assert {n.path for n in r.walk("main")} == want
    r.commit("main", "final")
    assert r.status("main") == []
    assert len([n for n in r.walk("main")]) == 6 * 3000
    r.close()
    _, out, _ = run_cli("fsck", store=store, state=state)
    assert "clean" in out


def test_s3_outage_mid_commit_loses_nothing(s3_server, tmp_path, monkeypatch):
    """SeaweedFS stops after the ranges are written, before the commit object:
    a clear StoreUnavailableError, staging intact, and a retry after restart lands it."""
    from gravfs.errors import StoreUnavailableError
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    store = s3_server.make_store(max_attempts=2)
    r = Repository.init(store, str(tmp_path / "state"), settings=small_settings())
    for i in range(30):
        r.write_file("main", f"f/{i:02d}", b"v%d" % i)
    head = r.head("main")
    want = _files(r, "main")
    real_put = r.commits.put

    def put_with_outage(c):
        s3_server.stop()
        return real_put(c)

    monkeypatch.setattr(r.commits, "put", put_with_outage)
    with pytest.raises(StoreUnavailableError):
        r.commit("main", "during outage")
    monkeypatch.setattr(r.commits, "put", real_put)
    s3_server.start()
    assert r.head("main", fresh=True) == head
    assert _files(r, "main") == want
    c = r.commit("main", "after outage")
    assert _files(r, c.id) == want and r.status("main") == []
    r.close()


def test_killed_commit_leaves_no_temp_sst(tmp_path):
    """A commit killed while an SST sits in the workspace's temp directory: the next
    open removes it, and keeps the files of writers that are still running."""
    from gravfs.version.committed.writer import process_start
    store, state, old_head, want = _setup(tmp_path)
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, GRAVFS_CRASH_AT="sst:written")
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "commit", "main", "-m", "crashy"],
                       env=env, capture_output=True, timeout=120)
    assert p.returncode == CRASH_EXIT_CODE, p.stderr
    from gravfs.version.config import Workspace
    from gravfs.store import open_store
    tmp = os.path.join(Workspace.for_store(state, open_store(store).url).root, "sst-tmp")
    # what the killed commit left, named by the pid and start time of a dead process
    left = sorted(os.listdir(tmp))
    assert left and all(".sst" in n for n in left), left
    # a live writer in another process, a reused pid (live pid, other start time),
    # a dead pid with the older name format, and a file gravfs does not write
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        start = process_start(sleeper.pid)
        live = [f"{sleeper.pid}-{start}-0.sst", f"{sleeper.pid}-{start}-1.sst.0a1b2c.tmp"]
        reused = f"{sleeper.pid}-{int(start) + 1}-0.sst"
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        old_format = f"{int(dead.stdout)}-3.sst"
        for n in [*live, reused, old_format, "notes.txt"]:
            with open(os.path.join(tmp, n), "wb") as f:
                f.write(b"x")
        r = Repository.open(store, state)
        assert sorted(os.listdir(tmp)) == sorted([*live, "notes.txt"])
        assert r.head("main") == old_head and _files(r, "main") == want
        r.commit("main", "retry")
        assert _files(r, r.head("main")) == want
        r.close()
    finally:
        sleeper.kill()
        sleeper.wait()
    r = Repository.open(store, state)  # the writer is gone now
    assert sorted(os.listdir(tmp)) == ["notes.txt"]
    r.close()


def test_parallel_commit_whose_worker_fails_keeps_everything_staged(tmp_path, monkeypatch):
    """A bulk commit spread over worker processes that read the staged changes
    themselves (staging/feed.py): a worker whose store fails fails the commit with
    the store's error; the head stays, every change stays staged, and the next
    commit lands them all."""
    from gravfs.errors import StoreUnavailableError
    from gravfs.fs.entry import EntryInfo, encode_entry, entry_identity
    from gravfs.version.committed.record import encode_value
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    r = Repository.init(store, state, settings=small_settings())
    addr, _ = r.data.put_bytes(b"x")
    head = r.head("main")
    paths = [b"t/day=%02d/part-%05d" % (i // 1000, i) for i in range(4000)]
    values = []
    for i in range(len(paths)):
        data = encode_entry(EntryInfo(address=addr, size=1, mtime_ns=i))
        values.append(encode_value(entry_identity(data), data))
    r.staging.put_many("main", list(zip(paths, values)), head)

    def spread(repo):  # even this small set goes to a worker process (and this one)
        repo.committed.workers = 2
        repo.committed.parallel_min_records = repo.committed.parallel_min_ranges = 1
        repo.committed.slices = 4

    spread(r)
    monkeypatch.setenv("GRAVFS_STORE_FAULT", "op=write")  # only the workers open the store now
    with pytest.raises(StoreUnavailableError):
        r.commit("main", "bulk")
    monkeypatch.delenv("GRAVFS_STORE_FAULT")
    assert r.head("main", fresh=True) == head
    assert sorted(k for _, k in r.status("main")) == paths
    r.close()
    r = Repository.open(store, state)
    spread(r)
    c = r.commit("main", "bulk")
    assert [rec[0] for rec in r.committed.iter(c.metarange)] == paths
    assert r.status("main") == []
    r.close()


def test_status_over_chunks_and_paths_is_the_brute_force_answer(tmp_path):
    """status compares changes with the head a chunk at a time (dense ones by a scan
    of their range) and reads only from each path given: over more changes than a
    chunk holds, with and without a compacted staging, it lists what comparing every
    staged change with the head's entry does."""
    from gravfs.fs.entry import EntryInfo, encode_entry, entry_identity
    from gravfs.version.committed.record import encode_value
    from gravfs.version.compaction import compact
    from gravfs.version.staging.feed import CHUNK
    r = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"))
    addr, _ = r.data.put_bytes(b"x")

    def value(n: int) -> bytes:
        data = encode_entry(EntryInfo(address=addr, size=1, mtime_ns=n))
        return encode_value(entry_identity(data), data)

    def path(i: int) -> bytes:  # d.N and d/N sort apart ("." < "/"): paths must not mix them
        return b"d%s%d/f%06d" % (b"./"[i % 2:i % 2 + 1], i % 5, i)

    base = {path(i): value(i) for i in range(0, 60000, 2)}
    r.staging.put_many("main", sorted(base.items()), r.head("main"))
    r.commit("main", "base")
    staged: dict[bytes, bytes | None] = {}
    for i in range(0, 60000, 3):  # changed, unchanged (same value), removed, added, ...
        staged[path(i)] = (None if i % 4 == 0 else value(i) if i % 5 == 0 else value(i + 1))
    staged[b"d/0"] = None  # removing what the head does not hold lists nothing

    def want(under=None):
        rows = []
        for k, v in sorted(staged.items()):
            if under and not any(k == u or k.startswith(u + b"/") for u in under):
                continue
            old = base.get(k)
            kind = ("removed" if old is not None else None) if v is None else (
                "added" if old is None else "changed" if old != v else None)
            if kind:
                rows.append((kind, k))
        return rows

    r.staging.put_many("main", sorted(staged.items()), r.head("main"))
    assert len(staged) > CHUNK
    for compacted in (False, True):
        if compacted:
            assert compact(r, "main")
            more = {path(i): value(i + 7) for i in range(1, 60000, 7)}
            r.staging.put_many("main", sorted(more.items()), r.head("main"))
            staged.update(more)
        got = r.status("main")
        assert got == want() and {k for k, _ in got} == {"added", "changed", "removed"}
        for under in ([b"d/1"], [b"d.3", b"d/1"], [b"d/1", b"d/1/f000011"], [b"d.3/f000003"],
                      [b"d"], [b"e"], [b"d/9"]):
            assert sorted(r.status("main", under)) == sorted(want(under)), under
    r.close()
