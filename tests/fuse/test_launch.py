"""The mount daemon's life: kill -9 recovery, the mount.gravfs helper, the systemd unit."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from gravfs.fuse.daemonrecord import process_state
from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import write_bytes as _write, read_bytes as _read
from tests.fuse_util import ROOT, Mount, _alive, wait_for

HELPER = os.path.join(ROOT, "scripts", "mount.gravfs")
UNIT = os.path.join(ROOT, "systemd", "gravfs@.service")


def test_kill9_keeps_everything_closed_or_fsynced(gravfs_mount):
    m = gravfs_mount
    os.makedirs(m.branch_path("d/e"))
    _write(m.branch_path("d/closed"), b"closed before the kill")
    _write(m.branch_path("d/e/big"), os.urandom(5 << 20))
    big = _read(m.branch_path("d/e/big"))
    os.rename(m.branch_path("d/closed"), m.branch_path("d/renamed"))
    os.symlink("renamed", m.branch_path("d/link"))
    synced = open(m.branch_path("d/synced"), "wb")
    synced.write(b"fsynced, still open")
    synced.flush()
    os.fsync(synced.fileno())
    pending = open(m.branch_path("d/pending"), "wb")
    pending.write(b"never closed")
    pending.flush()  # reaches the daemon's local copy, but no close/fsync
    m.kill9(clear=False)  # leave the dead mount for `gravfs mount` to clear
    for f in (synced, pending):
        try:
            f.close()
        except OSError:
            pass
    m.remount()
    assert _read(m.branch_path("d/renamed")) == b"closed before the kill"
    assert _read(m.branch_path("d/synced")) == b"fsynced, still open"
    assert _read(m.branch_path("d/e/big")) == big
    assert os.readlink(m.branch_path("d/link")) == "renamed"
    assert not os.path.exists(m.branch_path("d/closed"))
    # a file created and never closed or fsync'd had no state to keep (README: Files
    # open for writing): the next mount removes it
    assert not os.path.exists(m.branch_path("d/pending"))
    cid = m.commit()
    assert _read(m.path("commits", cid, "d/synced")) == b"fsynced, still open"
    assert "unsaved local file(s) of a dead mount" in m.log_text()


def test_a_daemon_that_no_longer_answers_is_reported_and_umount_force_frees_its_waiters(
        gravfs_mount, tmp_path):
    """A stopped daemon (SIGSTOP, Ctrl-Z) leaves every process using the mount waiting,
    and gravfs mount and umount asking it for its pid would wait too. They ask with a
    deadline and, since the daemon's record shows it stopped, say so, name it and
    change nothing (it may be continued); without a record (another state dir) they
    only say it does not answer. umount --force aborts the connection: the waiting
    process gets an error, and the next mount works. (A killed daemon that cannot
    exit they abort themselves: the test after this one.)"""
    m = gravfs_mount
    _write(m.branch_path("kept"), b"closed before the stop")
    m.env["GRAVFS_MOUNT_PROBE_WAIT"] = "1"
    pid = m.pid()
    os.kill(pid, signal.SIGSTOP)
    waiter = None
    try:
        waiter = subprocess.Popen([sys.executable, "-c", "import os, sys\ntry:\n"
                                   f"    os.stat({m.branch_path('nothing-yet')!r})\n"
                                   "except OSError as e:\n    print(e.errno)"],
                                  stdout=subprocess.PIPE, text=True)
        for args in (("mount", m.mnt), ("umount", m.mnt)):
            res = m.cli(*args, check=False, timeout=60)
            assert res.returncode != 0
            assert res.stderr.strip() == (
                f"gravfs: {m.mnt} is a gravfs mount whose daemon (pid {pid}) is stopped "
                f"(SIGSTOP, or Ctrl-Z on a foreground mount): 'kill -CONT {pid}' resumes it; "
                f"'gravfs umount --force {m.mnt}' aborts its connection instead (the processes "
                "waiting on it get an error, and what was written and not closed is lost)"
            ), res.stderr
        # without the daemon's record (another state dir), only that it does not answer
        res = m.cli("--state-dir", str(tmp_path / "elsewhere"), "umount", m.mnt, check=False,
                    timeout=60)
        assert res.returncode != 0
        assert res.stderr.strip() == (
            f"gravfs: {m.mnt} is a gravfs mount whose daemon does not answer (for 1 s); if "
            f"the daemon is dead (kill -9, out of memory), 'gravfs umount --force {m.mnt}' "
            "aborts its connection: the processes waiting on it get an error, and what "
            "was written and not closed is lost"), res.stderr
        assert waiter.poll() is None  # still waiting on the daemon
        m.cli("umount", "--force", m.mnt, timeout=60)
        out, _ = waiter.communicate(timeout=30)
        assert int(out) in (errno.ECONNABORTED, errno.ENOTCONN)
        assert not os.path.ismount(m.mnt)
    finally:
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
        os.kill(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: not _alive(pid), timeout=30)
    m.remount()
    assert _read(m.branch_path("kept")) == b"closed before the stop"


def _threads_in_d_state(pid: int) -> set[str]:
    """The threads of a process waiting uninterruptibly in the kernel."""
    return {tid for tid in os.listdir(f"/proc/{pid}/task") if process_state(int(tid)) == "D"}


def _a_thread_stays_in_d_state(pid: int) -> bool:
    """A thread in D now and half a second later (not a moment's disk wait)."""
    first = _threads_in_d_state(pid)
    if not first:
        return False
    time.sleep(0.5)
    return bool(first & _threads_in_d_state(pid))


@pytest.mark.parametrize("by", ["mount", "umount"])
def test_a_killed_daemon_that_cannot_exit_is_aborted_by_mount_and_umount(tmp_path, by):
    """The hung kill met by the stress test on S3, made on purpose: a read waits on the
    daemon (its data fetch hangs) holding the file's pages, a commit from another
    workspace moves the branch, the watcher's invalidation of that file waits on those
    pages, and kill -9 then leaves a daemon that cannot exit, its mount and the reader
    stuck. gravfs mount (or umount) finds the daemon's record, sees it killed, aborts
    the connection and goes on: the reader gets an error, the next mount serves."""
    m = Mount(str(tmp_path)).init()
    src = tmp_path / "src"
    src.mkdir()
    content = os.urandom(300_000)
    (src / "f").write_bytes(content)
    m.cli("import", "-q", str(src), "main", "-m", "f")
    other = Mount(str(tmp_path))  # the same store, its own workspace: commits from outside
    other.state_dir = str(tmp_path / "other-state")
    m.env["GRAVFS_STORE_FAULT"] = "op=get|get_range|download,key=data/*,mode=hang,secs=600"
    m.mount(options=["poll=0.2"])
    del m.env["GRAVFS_STORE_FAULT"]
    m.env["GRAVFS_MOUNT_PROBE_WAIT"] = "1"
    pid = m.pid()
    assert os.stat(m.branch_path("f")).st_size == len(content)  # the kernel knows its inode
    reader = subprocess.Popen([sys.executable, "-c", "import os, sys\ntry:\n"
                               f"    open({m.branch_path('f')!r}, 'rb').read()\n"
                               "    print(0)\nexcept OSError as e:\n    print(e.errno)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "injected hang" in m.log_text(), timeout=30)
        (tmp_path / "more").mkdir()
        (tmp_path / "more" / "g").write_bytes(b"g")
        other.cli("import", "-q", str(tmp_path / "more"), "main:more", "-m", "g")
        wait_for(lambda: "branch main changed outside the mount" in m.log_text(), timeout=30)
        wait_for(lambda: _a_thread_stays_in_d_state(pid), timeout=30)  # the watcher, on f's pages
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        assert os.path.exists(f"/proc/{pid}/task"), "the daemon exited: nothing was stuck"
        assert reader.poll() is None  # still waiting on the daemon
        if by == "mount":
            res = m.cli("mount", m.mnt, "-o", "poll=0.2", timeout=60)
            m.mounted = True
        else:
            res = m.cli("umount", m.mnt, timeout=60)
            assert not os.path.ismount(m.mnt)
        assert f"its daemon (pid {pid}) was killed and cannot exit" in res.stderr, res.stderr
        out, _ = reader.communicate(timeout=30)
        assert int(out) in (errno.ECONNABORTED, errno.ENOTCONN, errno.EIO), out
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30)
    finally:
        if reader.poll() is None:  # never leave the reader (and this test) stuck
            m.cli("umount", "--force", m.mnt, check=False, timeout=60)
            reader.kill()
            reader.communicate()
    if by == "umount":
        m.remount()
    try:
        assert _read(m.branch_path("f")) == content
        assert _read(m.branch_path("more/g")) == b"g"
    finally:
        m.cleanup()


@pytest.mark.parametrize("then", [None, signal.SIGTERM, signal.SIGHUP], ids=["once", "TERM", "HUP"])
def test_sigterm_stages_open_files_and_unmounts(gravfs_mount, then):
    """Also with another signal while the daemon stops (a second Ctrl-C, a hang-up):
    either used to kill the daemon before it staged the open file or unmounted."""
    m = gravfs_mount
    pid = m.pid()
    f = open(m.branch_path("open-at-stop"), "wb")
    f.write(b"written, not closed")
    f.flush()
    os.kill(pid, signal.SIGTERM)
    if then is not None:
        time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):  # (already gone: nothing to kill)
            os.kill(pid, then)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), timeout=30)
    try:
        f.close()
    except OSError:
        pass
    wait_for(lambda: not os.path.ismount(m.mnt), timeout=10)
    assert f"unmounted {m.mnt}" in m.log_text()  # its own end, not the signal's
    assert m.cli("cat", "main:open-at-stop").stdout == "written, not closed"


def test_sigterm_while_the_watcher_invalidates_a_busy_directory_exits(tmp_path):
    """SIGTERM while the watcher drops the kernel's entries of a big directory that
    another process keeps looking names up in: the loop used to stop serving at once,
    so the next lookup held the directory with nobody to answer it, the invalidation
    thread waited on it for good and so did the daemon's exit (every run by hand, 5 of
    5). The daemon now lets the round finish before it stops serving."""
    import threading

    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(5000):
        (src / "d" / f"f{i}").write_bytes(b"x")
    m = Mount(str(tmp_path)).init()
    m.cli("import", "-q", str(src), "main", "-m", "5000 files")
    m.mount()
    pid = m.pid()
    d = m.branch_path("d")
    stop = threading.Event()

    def probe(k: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                os.stat(f"{d}/missing{k}.{i}")
            except OSError:
                pass

    try:
        assert sum(1 for e in os.scandir(d) if e.stat()) == 5000  # the kernel knows them all
        for k in range(3):
            threading.Thread(target=probe, args=(k,), daemon=True).start()
        _write(str(tmp_path / "local"), b"y")
        m.cli("put", str(tmp_path / "local"), "main:other")  # the next round invalidates
        wait_for(lambda: "invalidating" in m.log_text(), timeout=10)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), timeout=20)
        assert not os.path.ismount(m.mnt)
    finally:
        stop.set()
        if _alive(pid):  # (hung: free the mount for the next tests)
            os.kill(pid, signal.SIGKILL)
            m.cli("umount", "--force", m.mnt, check=False, timeout=60)
        m.cleanup()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _helper(m: Mount, *args, env=None) -> subprocess.CompletedProcess:
    e = dict(m.env)
    e.update(env or {})
    e["GRAVFS_PYTHON"] = sys.executable
    return subprocess.run([HELPER, *args], capture_output=True, text=True, env=e, timeout=120)


def test_mount_helper_like_fstab(tmp_path):
    m = Mount(str(tmp_path)).init()
    src = tmp_path / "src.txt"
    src.write_bytes(b"via helper")
    m.cli("put", str(src), "main:x.txt")
    m.cli("commit", "main", "-m", "one")
    # what mount(8) runs for "STORE MOUNTPOINT fuse.gravfs branch=main,state_dir=...,nofail 0 0"
    opts = f"rw,nofail,_netdev,branch=main,state_dir={m.state_dir},allow_other"
    res = _helper(m, m.store, m.mnt, "-o", opts)
    try:
        assert res.returncode == 0, res.stderr
        assert os.path.ismount(m.mnt)
        assert os.listdir(m.mnt) == ["x.txt"]
        assert _read(m.path("x.txt")) == b"via helper"
        _write(m.path("y.txt"), b"written through the helper mount")
        mounts = open("/proc/mounts").read()
        line = next(l for l in mounts.splitlines() if f" {m.mnt} " in l)
        assert " fuse.gravfs " in line and "allow_other" in line
        # plain umount(8) works on it, and the daemon stages before exiting
        pid = m.pid()
        subprocess.run(["umount", m.mnt], check=True)
        wait_for(lambda: _zombie(pid), timeout=30)
    finally:
        m.cleanup()
    assert m.cli("cat", "main:y.txt").stdout == "written through the helper mount"


def test_a_mount_point_that_holds_files_is_refused_unless_nonempty(tmp_path):
    """A mount on a directory that holds files hides them while it lasts: a user who
    mounted on the wrong directory took them for lost (before: mounted without a word)."""
    m = Mount(str(tmp_path)).init()
    (tmp_path / "mnt" / "report.csv").write_bytes(b"mine")
    res = m.cli("mount", m.mnt, check=False)
    if os.path.ismount(m.mnt):  # (the fault: never leave it mounted)
        m.cleanup()
    assert res.returncode == 1 and f"cannot mount on {m.mnt}: it is not empty (it holds " \
        "'report.csv'), and the mount would hide what it holds" in res.stderr, res.stderr
    # on purpose, through the fstab helper as through the CLI; the files are there after
    res = _helper(m, m.store, m.mnt, "-o", f"state_dir={m.state_dir},nonempty")
    try:
        assert res.returncode == 0, res.stderr
        assert os.path.ismount(m.mnt) and sorted(os.listdir(m.mnt)) == ["branches", "commits", "tags"]
    finally:
        m.cleanup()
    assert (tmp_path / "mnt" / "report.csv").read_bytes() == b"mine"


def test_a_branch_mount_of_a_missing_branch_or_a_tag_says_which(tmp_path):
    m = Mount(str(tmp_path)).init()
    m.cli("tag", "create", "v1", "main")
    res = m.cli("mount", m.mnt, "-o", "branch=nope", check=False)
    assert (res.returncode, res.stderr) == (2, "gravfs: branch 'nope' not found\n")
    res = m.cli("mount", m.mnt, "-o", "branch=v1", check=False)
    assert res.returncode == 2 and "branch 'v1' not found: 'v1' is a tag (a mount without " \
        "branch= shows it, read-only, at tags/v1)" in res.stderr, res.stderr
    assert not os.path.ismount(m.mnt)


def test_mount_point_named_through_a_symlink(tmp_path):
    """The kernel lists a mount at its real path: gravfs umount of the symlink said "is
    not mounted", and a second mount through it said "already a mount point" where the
    real path was meant."""
    m = Mount(str(tmp_path))
    m.init()
    link = str(tmp_path / "link")
    os.symlink(m.mnt, link)
    m.cli("mount", link)
    try:
        assert os.path.ismount(m.mnt)
        assert f" {m.mnt} " in open("/proc/mounts").read()
        res = m.cli("mount", link, check=False)
        assert res.returncode == 1 and f"{m.mnt} is already a mount point" in res.stderr
        pid = m.pid()
        m.cli("umount", link)
        assert not os.path.ismount(m.mnt)
        wait_for(lambda: _zombie(pid), timeout=30)
    finally:
        m.cleanup()


def test_mount_helper_errors(tmp_path):
    m = Mount(str(tmp_path))
    res = _helper(m, m.store, m.mnt, "-o", f"state_dir={m.state_dir}")
    assert res.returncode == 32 and "no gravfs repository" in res.stderr
    m.init()
    res = _helper(m, m.store, m.mnt, "-o", f"state_dir={m.state_dir},frobnicate")
    assert res.returncode == 1 and "frobnicate" in res.stderr
    res = _helper(m, m.store, m.mnt, "-s", "-f", "-o", f"state_dir={m.state_dir},frobnicate")
    assert res.returncode == 0 and not os.path.ismount(m.mnt)
    res = _helper(m, m.store)
    assert res.returncode == 1
    assert not os.path.ismount(m.mnt)
    res = m.cli("mount", str(tmp_path / "nodir"), check=False)
    assert res.returncode == 2 and "nodir: no such directory" in res.stderr, res.stderr
    (tmp_path / "afile").write_bytes(b"")
    res = m.cli("mount", str(tmp_path / "afile"), check=False)
    assert res.returncode == 1 and "afile is not a directory" in res.stderr, res.stderr
    # a mount over the store or the state directory would hide them from its own daemon
    # (before: it mounted, branches/ listed no branch and every write failed)
    for where, what in ((tmp_path, f"this repository's store ({m.store}) is under it"),
                        (tmp_path / "state", f"gravfs's state directory ({m.state_dir}) is there")):
        res = m.cli("mount", str(where), check=False)
        assert res.returncode == 1 and f"cannot mount on {where}: {what}" in res.stderr, \
            res.stderr
        assert not os.path.ismount(where)
    # nor inside the store: its temp-file sweep (fsck) walked every file of every branch
    # and commit through the mount, and listings of the store went into it
    inside = tmp_path / "store" / "mnt"
    inside.mkdir()
    res = m.cli("mount", str(inside), check=False)
    if os.path.ismount(inside):  # (the fault: never leave it mounted)
        m.cli("umount", str(inside), check=False)
    assert res.returncode == 1 and f"cannot mount on {inside}: it is inside this " \
        f"repository's store ({m.store})" in res.stderr, res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_umount_leaves_a_filesystem_gravfs_did_not_mount_alone(tmp_path):
    """As root, fusermount unmounts whatever it is given: gravfs umount of a tmpfs
    (a wrong path) unmounted it, and --force lazily."""
    m = Mount(str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(other)], check=True)
    try:
        (other / "kept").write_text("x")
        for args in (("umount", str(other)), ("umount", "--force", str(other))):
            res = m.cli(*args, check=False, timeout=60)
            assert res.returncode == 1, res
            assert res.stderr.strip() == (f"gravfs: {other} is not a gravfs mount (it is "
                                          f"tmpfs): left mounted"), res.stderr
            assert os.path.ismount(other) and (other / "kept").read_text() == "x"
    finally:
        subprocess.run(["umount", str(other)])


def test_sigterm_as_soon_as_the_mount_exists_unmounts_cleanly(tmp_path):
    """A SIGTERM in the first milliseconds of the mount (a service stopped as it
    starts): between the kernel's mount and the signal receiver, it killed the daemon
    and left a dead mount, or was taken for a second signal and ignored."""
    from gravfs.fuse.launch import _mounted_at  # (mountinfo: asks the daemon nothing)

    m = Mount(str(tmp_path)).init()
    try:
        for attempt in range(3):
            proc = subprocess.Popen(
                [sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir",
                 m.state_dir, "mount", "--foreground", m.mnt],
                env=m.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                deadline = time.monotonic() + 60
                while not _mounted_at(m.mnt):  # the daemon may not serve yet
                    assert proc.poll() is None, proc.stderr.read().decode()
                    assert time.monotonic() < deadline, "the mount did not appear"
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=60)
                err = err.decode()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
            assert proc.returncode == 0, (attempt, err)
            assert f"unmounted {m.mnt}" in err  # its own end, not the signal's
            assert not _mounted_at(m.mnt)
    finally:
        m.cleanup()


def _closing_stdio() -> None:
    for fd in (0, 1, 2):
        os.close(fd)


def _stdio(pid: int) -> list[str]:
    return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (0, 1, 2)]


def test_a_mount_started_with_stdio_closed_keeps_its_files_off_descriptors_0_to_2(tmp_path):
    """``gravfs mount ... <&- >&- 2>&-`` (a script's, a service's): a foreground
    daemon's staging database took descriptors 0 to 2, where libfuse and child
    processes write their messages; a daemonized mount failed (an internal error,
    exit 70). Each closed one is /dev/null from the start (the daemon's 2 its log)."""
    from gravfs.fuse.launch import _mounted_at

    m = Mount(str(tmp_path)).init()
    cmd = [sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir", m.state_dir,
           "mount"]
    try:
        proc = subprocess.Popen(cmd + ["--foreground", m.mnt], env=m.env, cwd=ROOT,
                                preexec_fn=_closing_stdio)
        try:
            wait_for(lambda: _mounted_at(m.mnt) or proc.poll() is not None, timeout=60)
            assert proc.poll() is None
            assert _stdio(proc.pid) == ["/dev/null"] * 3
            _write(m.branch_path("f"), b"written")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert m.cli("cat", "main:f").stdout == "written"
        p = subprocess.run(cmd + [m.mnt], env=m.env, cwd=ROOT, preexec_fn=_closing_stdio,
                           timeout=120)
        assert p.returncode == 0 and _mounted_at(m.mnt)
        std = _stdio(m.pid())
        assert std[:2] == ["/dev/null"] * 2 and std[2].endswith(".log"), std
        assert _read(m.branch_path("f")) == b"written"
        m.umount()
        # mount(8)'s helper: stdout closed failed it with a traceback (flush of None)
        p = subprocess.run([HELPER, m.store, m.mnt, "-o", f"state_dir={m.state_dir}"],
                           env=dict(m.env, GRAVFS_PYTHON=sys.executable),
                           preexec_fn=_closing_stdio, timeout=120)
        assert p.returncode == 0 and _mounted_at(m.mnt)
        assert _read(m.branch_path("f")) == b"written"
    finally:
        m.cleanup()


def _unit_exec_start() -> list[str]:
    text = open(UNIT).read()
    line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    return line.split()


def test_systemd_unit_command_notifies_ready_and_stops_on_sigterm(tmp_path):
    """Run the unit's ExecStart as systemd would (Type=notify, EnvironmentFile)."""
    m = Mount(str(tmp_path)).init()
    conf = {"STORE": m.store, "MOUNTPOINT": m.mnt, "OPTIONS": "branch=main",
            "GRAVFS_STATE_DIR": m.state_dir}
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(60)
    argv = [re.sub(r"\$\{(\w+)\}", lambda v: conf[v.group(1)], w) for w in _unit_exec_start()]
    assert argv[0] == "/sbin/mount.gravfs"
    argv[0] = HELPER
    env = dict(m.env, NOTIFY_SOCKET=sock_path, GRAVFS_PYTHON=sys.executable, **conf)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        msg = sock.recv(4096)
        assert msg == b"READY=1"
        assert os.path.ismount(m.mnt)
        _write(m.path("f"), b"from the service")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not os.path.ismount(m.mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
        m.cleanup()
    assert m.cli("cat", "main:f").stdout == "from the service"


def test_memory_report_and_metadata_cache_budget(gravfs_mount):
    """``-o meta_cache_mb`` bounds the decoded-metadata cache; user.gravfs.memory on
    the root reports it beside the daemon's resident memory."""
    import json

    m = gravfs_mount
    os.mkdir(m.branch_path("d"))
    for i in range(300):
        _write(m.branch_path("d/f%03d" % i), b"x")
    m.cli("commit", "main", "-m", "files")
    m.umount()
    m.mount(options=["meta_cache_mb=3"])
    report = lambda: json.loads(os.getxattr(m.mnt, "user.gravfs.memory"))  # noqa: E731
    before = report()
    assert before["block_cache_capacity"] == 3 << 20
    assert before["rss_bytes"] >= before["rss_anon_bytes"] > 1 << 20 and before["inodes"] >= 4
    head = os.getxattr(m.branch_path(), "user.gravfs.commit").decode()
    names = sorted(os.listdir(os.path.join(m.mnt, "commits", head, "d")))  # read from the tree
    assert len(names) == 300
    listed = report()
    assert listed["block_cache_bytes"] == 0  # a listing decodes blocks without caching them
    # lookups the kernel has not cached (another name of the commit): the second in a
    # block decodes and caches it
    for name in names:
        os.stat(os.path.join(m.mnt, "commits", head[:12], "d", name))
    after = report()
    assert 0 < after["block_cache_bytes"] <= 3 << 20
    assert after["inodes"] > before["inodes"]
    assert after["python_blocks"] > before["python_blocks"] > 0  # the listing's live objects
    assert json.loads(os.getxattr(m.mnt, "user.gravfs.memory"))["read_cache_bytes"] == 0


def _local_files(m: Mount) -> list[str]:
    """Every file in the daemons' local copy directories of m's workspace."""
    out = []
    for repo in os.listdir(os.path.join(m.state_dir, "repos")):
        base = os.path.join(m.state_dir, "repos", repo, "files")
        for daemon in os.listdir(base) if os.path.isdir(base) else ():
            out += [os.path.join(d, n) for d, _, names in os.walk(os.path.join(base, daemon))
                    for n in names]
    return out


def test_empty_files_made_ahead_go_quietly_with_their_daemon(gravfs_mount):
    m = gravfs_mount
    _write(m.branch_path("made"), b"x")
    spares = wait_for(lambda: _local_files(m))  # the closed file was staged: made ahead
    assert all(os.path.getsize(p) == 0 for p in spares)
    m.kill9(clear=False)
    m.remount()
    # the dead daemon's spares are removed, and not reported as unsaved files
    assert not set(spares) & set(_local_files(m))
    assert "unsaved local file(s)" not in m.log_text()
    assert _read(m.branch_path("made")) == b"x"
    m.umount()
    assert _local_files(m) == []  # a clean unmount removes its own


def _fd_table_size(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("FDSize:")).split()[1])


def _fd_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        soft = next(line for line in f if line.startswith("Max open files")).split()[3]
    return 1 << 62 if soft == "unlimited" else int(soft)


def test_the_daemon_reserves_its_descriptor_table_at_start(gravfs_mount):
    """Each mapped range holds a descriptor; growing the table later, with threads
    running, stalls the lookup that opened the range (an RCU grace period)."""
    from gravfs.fuse.launch import FD_TABLE_SLOTS

    pid = gravfs_mount.pid()
    assert _fd_table_size(pid) >= min(FD_TABLE_SLOTS, _fd_limit(pid))
    assert len(os.listdir(f"/proc/{pid}/fd")) < 200  # the slots, not descriptors


def test_reserving_descriptors_leaves_an_open_descriptor_alone(tmp_path):
    from gravfs.fuse.launch import _reserve_descriptors

    p = tmp_path / "held"
    p.write_bytes(b"mine")
    fd = os.open(p, os.O_RDONLY)
    me = os.getpid()
    top = min(_fd_table_size(me) * 2, _fd_limit(me))  # past the table: the reservation's own slot
    try:
        os.dup2(fd, top - 1)
        _reserve_descriptors(top)
        assert os.pread(top - 1, 4, 0) == b"mine"
        os.close(top - 1)
        _reserve_descriptors(top)
        try:
            os.fstat(top - 1)
            raise AssertionError("the reserved slot was left open")
        except OSError:
            pass
    finally:
        os.close(fd)


def test_the_daemon_log_is_rotated(tmp_path, monkeypatch):
    """A daemon's log grew without end (an error a failing request, for months): past
    LOG_BYTES it is rotated, LOG_KEPT earlier files kept."""
    import logging

    from gravfs.fuse import launch

    path = str(tmp_path / "mount-x.log")
    monkeypatch.setattr(launch, "LOG_BYTES", 10_000)
    h = launch.log_handler(path)
    log = logging.getLogger("test.rotation")
    log.propagate = False
    log.addHandler(h)
    try:
        for i in range(2000):
            log.error("read: data object %d is missing -> EIO", i)
    finally:
        log.removeHandler(h)
        h.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["mount-x.log"] + [f"mount-x.log.{i}" for i in range(1, 5)]
    assert all(os.path.getsize(tmp_path / n) <= 10_000 for n in names)
    with open(path) as f:
        assert "data object 1999 is missing" in f.read()


def test_the_daemons_stderr_follows_its_log_file(tmp_path):
    """What the daemon's file descriptor 2 gets (libfuse's messages, a crash's traceback)
    went on into the first log file after it was rotated away, and then into a removed
    one; it goes to the current file."""
    import subprocess
    import sys

    path = str(tmp_path / "mount-x.log")
    code = f"""
import logging, os, sys
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))!r})
from gravfs.fuse import launch
launch.LOG_BYTES = 2000
fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
os.dup2(fd, 2)
log = logging.getLogger("x")
log.addHandler(launch.log_handler({path!r}, stderr=True))
for i in range(200):
    log.error("line %d", i)
os.write(2, b"on stderr at the end\\n")
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    with open(path) as f:
        assert "on stderr at the end" in f.read()


def test_a_failed_mount_says_what_fusermount3_said(tmp_path):
    """A user's mount that fusermount3 refuses (``-o allow_other`` without
    ``user_allow_other``, a mount point the user may not write) said only
    "fuse_session_mount failed (see <log>)"; the daemon's stderr is that log, and the
    message now carries its last fuse line written since the mount began. (Root mounts
    without fusermount3; what it says was checked by hand as another user.)"""
    from gravfs.fuse.launch import fuse_said

    log = tmp_path / "mount-x.log"
    log.write_text("fusermount3: an earlier mount's complaint\n"
                   "2026-12-06 23:03:45,028 INFO gravfs.fuse.launch: starting\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("fuse: first line\n2026-12-06 23:03:45,029 INFO x: y\nfusermount3: option "
                "allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf\n"
                "2026-12-06 23:03:45,030 ERROR gravfs.fuse.launch: mount failed\n")
    assert fuse_said(str(log), start) == ("fusermount3: option allow_other only allowed if "
                                          "'user_allow_other' is set in /etc/fuse.conf")
    assert fuse_said(str(log), log.stat().st_size) == ""
    assert fuse_said(str(tmp_path / "missing.log"), 0) == ""


def test_an_unmount_refused_as_busy_names_who_uses_the_mount(gravfs_mount):
    """fusermount3 says only "Device or resource busy"; the refusal names the processes
    to stop, and what detaches the mount at once."""
    m = gravfs_mount
    _write(m.branch_path("f"), b"x")
    user = subprocess.Popen(["sleep", "120"], cwd=m.branch_path(""))
    try:
        res = m.cli("umount", m.mnt, check=False)
        assert res.returncode == 1 and os.path.ismount(m.mnt)
        assert f"it is in use by sleep (pid {user.pid}, working directory)" in res.stderr
        assert f"'fusermount3 -u -z {m.mnt}'" in res.stderr
    finally:
        user.kill()
        user.wait()
    m.umount()
    assert m.cli("cat", "main:f").stdout == "x"


def test_a_log_file_option_is_the_callers_path_and_its_failure_one_line(tmp_path):
    """``-o log_file=NAME`` without a directory failed the daemon with "[Errno 2] No
    such file or directory: ''" (and a relative one would have been taken from /, where
    the daemon runs); it is the caller's relative path, and one that cannot be written
    is refused before the daemon starts, naming it."""
    m = Mount(str(tmp_path / "m")).init()
    cmd = [sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir", m.state_dir,
           "mount", m.mnt]
    env = dict(m.env, PYTHONPATH=ROOT)
    try:
        p = subprocess.run(cmd + ["-o", "log_file=mount.log"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        m.mounted = True
        log = tmp_path / "mount.log"
        assert f"mounted {m.store} on {m.mnt}" in log.read_text()
        assert log.stat().st_mode & 0o777 == 0o600
        m.umount()
        p = subprocess.run(cmd + ["-o", "log_file=/proc/nope/x.log"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
        assert (p.returncode, p.stderr) == (1, "gravfs: cannot write the log file "
                                               "/proc/nope/x.log (-o log_file): No such file "
                                               "or directory\n")
        assert not os.path.ismount(m.mnt)
    finally:
        m.cleanup()
