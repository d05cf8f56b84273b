"""Helpers for repository-level tests: a fresh repository on the local store or S3."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from gravfs.version.config import RepoSettings
from gravfs.fs.repository import Repository

# Tiny ranges so that small test trees span many ranges and exercise range logic.
SMALL_RANGES = dict(min_size=256, max_size=2048, raggedness=8)


def small_settings() -> RepoSettings:
    return RepoSettings.new(**SMALL_RANGES)


def head_metarange(repo: Repository, branch: str) -> str:
    """The metarange of the branch's head as the store has it now (not a cached head)."""
    return repo.commits.get(repo.head(branch, fresh=True)).metarange


@pytest.fixture(params=["local", "s3"])
def store_target(request, tmp_path):
    """A fresh, empty store: a local directory, or a unique prefix on SeaweedFS."""
    if request.param == "local":
        return str(tmp_path / "store")
    server = request.getfixturevalue("s3_server")
    if server.proc is None or server.proc.poll() is not None:
        server.start()
    return server.make_store()


@pytest.fixture
def repo(store_target, tmp_path):
    r = Repository.init(store_target, str(tmp_path / "state"), settings=small_settings())
    yield r
    r.close()


def run_cli(*args, store: str, state: str, input: bytes | None = None, check: bool = True):
    """Run `python -m gravfs.cli` as a user would; returns CompletedProcess (text)."""
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state)
    env.pop("GRAVFS_DEBUG", None)
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", *args], env=env, input=input,
                       capture_output=True, timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise AssertionError(f"gravfs {' '.join(args)} failed ({p.returncode}): {err}")
    return p.returncode, out, err


@contextlib.contextmanager
def read_only(path: str):
    """``path`` made read-only in place (a read-only bind mount over itself), as a
    store on a disk mounted read-only, or one whose disk went read-only on an error."""
    if subprocess.run(["mount", "--bind", path, path], capture_output=True).returncode:
        pytest.skip("a read-only bind mount needs root (CAP_SYS_ADMIN)")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", path], check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", path], check=True)
