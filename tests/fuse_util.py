"""Real FUSE mounts for tests: a repository, a daemonized ``gravfs mount``, the CLI.

Test modules use it with ``from tests.fuse_util import *`` (which brings the
fixtures into the module). Everything goes through the real command line
(``python -m gravfs.cli``), so daemonizing, readiness and umount are exercised
by every test that mounts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

__all__ = ["Mount", "gravfs_mount", "fuse_available", "s3_env", "wait_for"]


def write_bytes(path: str, data: bytes, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def errno_of_call(fn, *args) -> int:
    """The errno ``fn(*args)`` fails with (AssertionError if it succeeds)."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    raise AssertionError(f"{fn.__name__}{args} did not fail")


def fails_with(err: int, fn, *args) -> bool:
    """Whether ``fn(*args)`` fails with errno ``err`` now (for wait_for: a kernel cache
    may answer for a while before the daemon is asked)."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno == err
    return False


def fuse_available() -> bool:
    return os.path.exists("/dev/fuse") and os.access("/dev/fuse", os.R_OK | os.W_OK)


def wait_for(pred, timeout: float = 10.0, interval: float = 0.05):
    """Poll pred() until it returns a truthy value; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except OSError:
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value {last!r})")


def s3_env(server) -> dict:
    return {"GRAVFS_S3_ENDPOINT": server.endpoint_url, "AWS_ENDPOINT_URL": server.endpoint_url,
            "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1"}


class Mount:
    """One repository and (optionally) its mount point, driven through the CLI."""

    def __init__(self, base: str, store: str | None = None, env: dict | None = None):
        self.base = base
        self.store = store or os.path.join(base, "store")
        self.state_dir = os.path.join(base, "state")
        self.mnt = os.path.join(base, "mnt")
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.env["PYTHONPATH"] = ROOT + os.pathsep + self.env.get("PYTHONPATH", "")
        self.env.pop("GRAVFS_STORE", None)
        self.env.pop("GRAVFS_STATE_DIR", None)
        os.makedirs(self.mnt, exist_ok=True)
        self.mounted = False
        self.branch = None
        self.options: list[str] = []

    # -- command line ---------------------------------------------------------------

    def cli(self, *args, check: bool = True, timeout: float = 300, input=None):
        cmd = [sys.executable, "-m", "gravfs.cli", "-s", self.store, "--state-dir",
               self.state_dir, *args]
        res = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=ROOT,
                             timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({res.returncode}):\n"
                                 f"{res.stdout}\n{res.stderr}\n{self.log_tail()}")
        return res

    def init(self) -> "Mount":
        self.cli("init")
        return self

    def commit(self, branch: str = "main", message: str = "test") -> str:
        self.cli("commit", branch, "-m", message)
        return self.head(branch)

    def head(self, branch: str = "main") -> str:
        import json
        rows = json.loads(self.cli("branch", "list", "--json").stdout)
        return {r["name"]: r["commit"] for r in rows}[branch]

    # -- mount ----------------------------------------------------------------------

    def mount(self, branch: str | None = None, options: list[str] | None = None) -> "Mount":
        args = ["mount", self.mnt]
        self.branch = branch
        self.options = list(options or [])
        if branch:
            args += ["--branch", branch]
        for o in self.options:
            args += ["-o", o]
        self.cli(*args)
        assert os.path.ismount(self.mnt), "gravfs mount returned before the mount was ready"
        self.mounted = True
        return self

    def remount(self) -> "Mount":
        return self.mount(self.branch, self.options)

    def pid(self) -> int:
        return int(os.getxattr(self.mnt, "user.gravfs.pid"))

    def umount(self) -> None:
        if not os.path.ismount(self.mnt):
            self.mounted = False
            return
        for attempt in range(50):
            res = self.cli("umount", self.mnt, check=False)
            if res.returncode == 0:
                break
            if not os.path.ismount(self.mnt):  # unmounted, but files went to lost+found
                self.mounted = False
                raise AssertionError(f"umount reported: {res.stderr}")
            time.sleep(0.1)  # a process of the test may still hold a file open
        else:
            raise AssertionError(f"umount failed: {res.stderr}")
        self.mounted = False

    def kill9(self, clear: bool = True) -> None:
        """Kill the daemon without any chance to flush; clear the dead mount unless told not to."""
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not _alive(pid), timeout=10)
        if clear:
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
            wait_for(lambda: not os.path.ismount(self.mnt), timeout=10)
        self.mounted = False

    def cleanup(self) -> None:
        try:
            os.stat(self.mnt)
        except OSError:  # a dead mount
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        if os.path.ismount(self.mnt):
            try:
                self.umount()
            except Exception:
                subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)

    # -- paths and logs -----------------------------------------------------------------

    def path(self, *parts: str) -> str:
        return os.path.join(self.mnt, *parts)

    def branch_path(self, *parts: str, branch: str = "main") -> str:
        return os.path.join(self.mnt, "branches", branch, *parts)

    def log_text(self) -> str:
        logs = os.path.join(self.state_dir, "logs")
        out = []
        if os.path.isdir(logs):
            for name in sorted(os.listdir(logs)):
                with open(os.path.join(logs, name), errors="replace") as f:
                    out.append(f.read())
        return "\n".join(out)

    def log_tail(self, n: int = 4000) -> str:
        text = self.log_text()
        return ("--- mount log ---\n" + text[-n:]) if text else ""

    def assert_clean_log(self) -> None:
        """No handler hit an unexpected error (those are logged at ERROR with a traceback)."""
        bad = [l for l in self.log_text().splitlines() if " ERROR " in l or "Traceback" in l]
        assert not bad, "errors in the mount log:\n" + "\n".join(bad[:20])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def gravfs_mount(tmp_path):
    """A fresh local-store repository mounted (all branches) at ``m.mnt``."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    m = Mount(str(tmp_path)).init()
    m.mount()
    try:
        yield m
    finally:
        m.cleanup()
