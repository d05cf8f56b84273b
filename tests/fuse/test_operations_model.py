"""The mount against a model: a local directory receiving the same operations.

A hypothesis state machine writes, appends, truncates, renames (files and
directories), unlinks, makes and removes directories, makes hard links, symlinks,
fifos and device nodes, changes modes and owners and sets times on a mounted
branch and on a plain local directory, and also keeps up to three descriptors
open across those steps (writes, reads, truncates, fchmods, fsyncs through them),
and demands the same outcome (success or the same errno) and the same tree after
every step: kinds, contents, symlink targets, permission bits, owners, link counts
and which names share an inode. Commits (from this process, i.e. outside the
daemon) snapshot the model; the last commit's ``commits/<id>/`` directory must show
exactly that snapshot (unless descriptors were open at the commit: a file open for
writing is committed as its last close left it, which the model does not know).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import write_bytes as _write, read_bytes as _read

PATHS = ["x", "y", "a", "b", "a/x", "a/y", "a/c", "a/c/x", "a/c/d", "b/x", "b/a"]
paths = st.sampled_from(PATHS)
data = st.binary(max_size=48)
offsets = st.integers(min_value=0, max_value=96)
modes = st.sampled_from([0o600, 0o644, 0o755, 0o4755, 0o2755, 0o2745, 0o1777, 0o640, 0o000])
owners = st.sampled_from([(0, 0), (65534, 65533), (65534, 0), (-1, 65533)])
times = st.integers(min_value=0, max_value=2_000_000_000 * 10**9)
targets = st.sampled_from(["x", "a/x", "../x", "nowhere", "/nonexistent/abs", "a"])
slots = st.integers(0, 2)  # descriptors kept open across steps
open_flags = st.sampled_from([os.O_RDONLY, os.O_RDWR, os.O_RDWR | os.O_CREAT, os.O_RDWR | os.O_TRUNC,
                              os.O_WRONLY | os.O_APPEND, os.O_WRONLY | os.O_CREAT | os.O_EXCL])


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def snapshot(root: str) -> dict:
    """{relative path: (type, bytes of a file, permission bits, uid, gid, link count,
    device number)} (None for a directory's content and link count), and under the key
    "links" the groups of names sharing an inode."""
    out, inodes = {}, {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            s = os.lstat(p)
            content = None
            if stat.S_ISREG(s.st_mode):
                with open(p, "rb") as fh:
                    content = fh.read()
            elif stat.S_ISLNK(s.st_mode):
                content = os.readlink(p)
            nlink = None if stat.S_ISDIR(s.st_mode) else s.st_nlink
            out[rel] = (stat.S_IFMT(s.st_mode), content, stat.S_IMODE(s.st_mode), s.st_uid,
                        s.st_gid, nlink, s.st_rdev)
            if nlink is not None:
                inodes.setdefault(s.st_ino, set()).add(rel)
    out["links"] = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return out


def _append(path, payload):
    with open(path, "ab") as f:
        f.write(payload)


def _pwrite(path, off, payload):
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, payload, off)
    finally:
        os.close(fd)


def _ftruncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


class MountModel(RuleBasedStateMachine):
    mount = None  # set by the test
    repo = None
    scratch = None

    @initialize()
    def fresh_branch(self):
        self.branch = "m" + uuid.uuid4().hex[:10]
        self.repo.create_branch(self.branch)
        self.root = os.path.join(self.mount.mnt, "branches", self.branch)
        self.model = os.path.join(self.scratch, self.branch)
        os.makedirs(self.model)
        self.last_commit = None
        self.committed = None
        self.steps: list[str] = []  # this example's steps, for a failure that does not replay
        self.fds: dict[int, tuple[int, int]] = {}  # slot -> (model's, mount's descriptor)

    def both(self, fn, path, *args, path2=None, **kw):
        a = (os.path.join(self.model, path),) + ((os.path.join(self.model, path2),) if path2 else ())
        b = (os.path.join(self.root, path),) + ((os.path.join(self.root, path2),) if path2 else ())
        want = outcome(lambda *x: fn(*x, **kw), *a, *args)
        got = outcome(lambda *x: fn(*x, **kw), *b, *args)
        step = f"{fn.__name__}{(path, path2) + args}{kw}"
        self.steps.append(f"{step} -> {got}")
        assert got == want, f"{step}: mount {got}, local {want}\nsteps:\n" + "\n".join(self.steps)
        return got

    def same(self, step: str, fn, on_fds: bool = False):
        """fn(0), the step on the model's side, against fn(1), on the mount's: the same
        outcome. ``on_fds``: fn opens a descriptor, whose number may differ."""
        want, got = outcome(fn, 0), outcome(fn, 1)
        self.steps.append(f"{step} -> {got}")
        if on_fds and got[0] == want[0] == "ok":
            return got, want
        assert got == want, f"{step}: mount {got}, local {want}\nsteps:\n" + "\n".join(self.steps)
        return got, want

    def special(self, p) -> bool:
        """A fifo or device node: opening it would block or reach a device."""
        try:
            m = os.lstat(os.path.join(self.model, p)).st_mode
        except OSError:
            return False
        return not (stat.S_ISREG(m) or stat.S_ISDIR(m))

    @rule(p=paths, d=data)
    def write(self, p, d):
        if not self.special(p):
            self.both(_write, p, d)

    @rule(p=paths, d=data)
    def append(self, p, d):
        if not self.special(p):
            self.both(_append, p, d)

    @rule(p=paths, off=offsets, d=data)
    def pwrite(self, p, off, d):
        if not self.special(p):
            self.both(_pwrite, p, off, d)

    @rule(p=paths, size=offsets)
    def truncate(self, p, size):
        if not self.special(p):
            self.both(os.truncate, p, size)

    @rule(p=paths, size=offsets)
    def ftruncate(self, p, size):
        if not self.special(p):
            self.both(_ftruncate, p, size)

    @rule(src=paths, dst=paths)
    def link(self, src, dst):
        self.both(os.link, src, path2=dst)

    @rule(p=paths)
    def mkfifo(self, p):
        self.both(os.mkfifo, p, 0o640)

    @rule(p=paths, major=st.integers(1, 9), minor=st.integers(0, 300))
    def mknod(self, p, major, minor):
        self.both(os.mknod, p, stat.S_IFCHR | 0o600, os.makedev(major, minor))

    @rule(p=paths, mode=modes)
    def chmod(self, p, mode):
        self.both(os.chmod, p, mode)

    @rule(p=paths, owner=owners)
    def chown(self, p, owner):
        self.both(os.chown, p, *owner)

    @rule(p=paths, atime=times, mtime=times)
    def utime(self, p, atime, mtime):
        """Times set apart (of a symlink itself, not of what it names); the change
        time moves on (it is not settable)."""
        try:
            before = os.lstat(os.path.join(self.root, p)).st_ctime_ns
        except OSError:
            before = None
        if self.both(os.utime, p, ns=(atime, mtime), follow_symlinks=False)[0] != "ok":
            return
        s = os.lstat(os.path.join(self.root, p))
        assert (s.st_atime_ns, s.st_mtime_ns) == (atime, mtime)
        assert s.st_ctime_ns >= before

    @rule(p=paths)
    def dir_times_follow_entries(self, p):
        """Creating and removing a name moves its directory's mtime and ctime."""
        d = os.path.dirname(p)
        mdir = os.path.join(self.root, d)
        if not d or not os.path.isdir(os.path.join(self.model, d)):
            return  # (a branch's root has no entry to keep times in)
        name = "t" + uuid.uuid4().hex[:6]
        before = os.stat(mdir)
        os.mkdir(os.path.join(mdir, name))
        mid = os.stat(mdir)
        assert mid.st_mtime_ns > before.st_mtime_ns and mid.st_ctime_ns > before.st_ctime_ns
        os.rmdir(os.path.join(mdir, name))
        after = os.stat(mdir)
        assert after.st_mtime_ns > mid.st_mtime_ns and after.st_ctime_ns > mid.st_ctime_ns

    @rule(src=paths, dst=paths)
    def rename(self, src, dst):
        self.both(os.rename, src, path2=dst)

    @rule(p=paths)
    def unlink(self, p):
        self.both(os.unlink, p)

    @rule(p=paths)
    def mkdir(self, p):
        self.both(os.mkdir, p)

    @rule(p=paths)
    def rmdir(self, p):
        self.both(os.rmdir, p)

    @rule(p=paths)
    def read(self, p):
        if not self.special(p):
            self.both(_read, p)

    @rule(p=paths, to=targets)
    def symlink(self, p, to):
        self.both(lambda path: os.symlink(to, path), p)

    @rule(p=paths)
    def readlink(self, p):
        self.both(os.readlink, p)

    @rule(k=slots, p=paths, flags=open_flags)
    def open_fd(self, k, p, flags):
        if k in self.fds or self.special(p):
            return
        where = (os.path.join(self.model, p), os.path.join(self.root, p))
        got, want = self.same(f"open[{k}]{(p, flags)}",
                              lambda i: os.open(where[i], flags, 0o644), on_fds=True)
        if got[0] == "ok":
            self.fds[k] = (want[1], got[1])

    def on_fd(self, k, step: str, fn) -> None:
        if k in self.fds:
            self.same(f"{step}[{k}]", lambda i: fn(self.fds[k][i]))

    @rule(k=slots, off=offsets, d=data)
    def fd_pwrite(self, k, off, d):
        self.on_fd(k, f"pwrite{(off, d)}", lambda fd: os.pwrite(fd, d, off))

    @rule(k=slots, d=data)
    def fd_write(self, k, d):
        self.on_fd(k, f"write{(d,)}", lambda fd: os.write(fd, d))

    @rule(k=slots)
    def fd_read(self, k):
        self.on_fd(k, "pread", lambda fd: os.pread(fd, 256, 0))

    @rule(k=slots, size=offsets)
    def fd_truncate(self, k, size):
        self.on_fd(k, f"ftruncate({size})", lambda fd: os.ftruncate(fd, size))

    @rule(k=slots)
    def fd_stat(self, k):
        def seen(fd):  # (a directory's size and link count are the filesystem's own)
            s = os.fstat(fd)
            return ("dir" if stat.S_ISDIR(s.st_mode) else (s.st_size, s.st_nlink),
                    stat.S_IFMT(s.st_mode), stat.S_IMODE(s.st_mode))
        self.on_fd(k, "fstat", seen)

    @rule(k=slots, mode=st.sampled_from([0o600, 0o444, 0o755]))
    def fd_chmod(self, k, mode):
        self.on_fd(k, f"fchmod({mode:o})", lambda fd: os.fchmod(fd, mode))

    @rule(k=slots)
    def fd_sync(self, k):
        self.on_fd(k, "fsync", os.fsync)

    @rule(k=slots)
    def fd_close(self, k):
        if k in self.fds:
            fds = self.fds.pop(k)
            self.same(f"close[{k}]", lambda i: os.close(fds[i]))

    @rule()
    def commit(self):
        from gravfs.version.committer import NothingToCommitError
        try:
            c = self.repo.commit(self.branch, "model step")
        except NothingToCommitError:
            return
        self.steps.append(f"commit -> {c.id}")
        self.last_commit = c.id if not self.fds else None  # (see the module doc)
        self.committed = snapshot(self.model)

    @rule()
    def read_last_commit(self):
        if self.last_commit is None:
            return
        got = snapshot(os.path.join(self.mount.mnt, "commits", self.last_commit))
        assert got == self.committed

    @invariant()
    def same_tree(self):
        if getattr(self, "root", None) is None:
            return
        assert snapshot(self.root) == snapshot(self.model), "steps:\n" + "\n".join(self.steps)

    def teardown(self):
        for fds in getattr(self, "fds", {}).values():
            for fd in fds:
                os.close(fd)
        if getattr(self, "model", None):
            shutil.rmtree(self.model, ignore_errors=True)


class RestartModel(MountModel):
    """MountModel whose daemon is also unmounted, or killed with SIGKILL, and mounted
    again between steps (with no descriptor open): everything closed survives both."""

    @rule(kill=st.booleans())
    def restart(self, kill):
        if not self.fds:
            self.steps.append("kill -9, mount" if kill else "umount, mount")
            self.mount.kill9() if kill else self.mount.umount()
            self.mount.remount()


def _run_model(machine, m, tmp_path, examples: int) -> None:
    from gravfs.fs.repository import Repository

    repo = Repository.open(m.store, m.state_dir)
    machine.mount, machine.repo, machine.scratch = m, repo, str(tmp_path / "model")
    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples, stateful_step_count=30, deadline=None, derandomize=False,
            suppress_health_check=list(HealthCheck)))
    finally:
        repo.close()


EXAMPLES = int(os.environ.get("GRAVFS_MODEL_EXAMPLES", "100"))


def test_mount_matches_local_model(gravfs_mount, tmp_path):
    _run_model(MountModel, gravfs_mount, tmp_path, EXAMPLES)
    gravfs_mount.assert_clean_log()


def test_mount_matches_local_model_across_restarts_and_kill9(gravfs_mount, tmp_path):
    _run_model(RestartModel, gravfs_mount, tmp_path, max(1, EXAMPLES // 4))


def test_s3_mount_matches_local_model_across_restarts_and_kill9(s3_environ, tmp_path):
    """The same on an S3 store (SeaweedFS): write-back uploads, cold reads after a
    restart, and a kill with uploads pending."""
    from tests.fuse_util import Mount, s3_env

    url = f"s3://{s3_environ.bucket}/model-{uuid.uuid4().hex[:10]}"
    m = Mount(str(tmp_path / "host"), store=url, env=s3_env(s3_environ)).init()
    m.mount()
    try:
        _run_model(RestartModel, m, tmp_path, max(1, EXAMPLES // 4))
    finally:
        m.cleanup()
