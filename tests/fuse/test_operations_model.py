"""The mount against a model: a local directory receiving the same operations.

A hypothesis state machine writes, appends, truncates, renames (files and
directories), unlinks, makes and removes directories on a mounted branch and
on a plain local directory, and demands the same outcome (success or the
same errno) and the same tree after every step. Commits (from this process,
i.e. outside the daemon) snapshot the model; the last commit's
``commits/<id>/`` directory must show exactly that snapshot.
"""

from __future__ import annotations

import errno
import os
import shutil
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


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def snapshot(root: str) -> dict:
    """{relative path: bytes for files, None for directories}."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
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

    def both(self, fn, path, *args, path2=None):
        a = (os.path.join(self.model, path),) + ((os.path.join(self.model, path2),) if path2 else ())
        b = (os.path.join(self.root, path),) + ((os.path.join(self.root, path2),) if path2 else ())
        want = outcome(fn, *a, *args)
        got = outcome(fn, *b, *args)
        assert got == want, f"{fn.__name__}{(path, path2) + args}: mount {got}, local {want}"

    @rule(p=paths, d=data)
    def write(self, p, d):
        self.both(_write, p, d)

    @rule(p=paths, d=data)
    def append(self, p, d):
        self.both(_append, p, d)

    @rule(p=paths, off=offsets, d=data)
    def pwrite(self, p, off, d):
        self.both(_pwrite, p, off, d)

    @rule(p=paths, size=offsets)
    def truncate(self, p, size):
        self.both(os.truncate, p, size)

    @rule(p=paths, size=offsets)
    def ftruncate(self, p, size):
        self.both(_ftruncate, p, size)

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
        self.both(_read, p)

    @rule()
    def commit(self):
        from gravfs.version.committer import NothingToCommitError
        try:
            c = self.repo.commit(self.branch, "model step")
        except NothingToCommitError:
            return
        self.last_commit = c.id
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
        assert snapshot(self.root) == snapshot(self.model)

    def teardown(self):
        if getattr(self, "model", None):
            shutil.rmtree(self.model, ignore_errors=True)


def test_mount_matches_local_model(gravfs_mount, tmp_path):
    from gravfs.fs.repository import Repository

    m = gravfs_mount
    repo = Repository.open(m.store, m.state_dir)
    MountModel.mount, MountModel.repo, MountModel.scratch = m, repo, str(tmp_path / "model")
    try:
        run_state_machine_as_test(MountModel, settings=settings(
            max_examples=int(os.environ.get("GRAVFS_MODEL_EXAMPLES", "100")),
            stateful_step_count=30, deadline=None, derandomize=False,
            suppress_health_check=list(HealthCheck)))
    finally:
        repo.close()
    m.assert_clean_log()
