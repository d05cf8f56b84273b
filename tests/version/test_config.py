"""gravfs.version.config: one workspace per store, whatever path names it."""

from __future__ import annotations

import io
import logging
import os

import pytest

from gravfs import hashing
from gravfs.fs.repository import Repository
from tests.repo_util import small_settings


def _staged(store: str, state: str) -> list[bytes]:
    with Repository.open(store, state) as r:
        return [key for _, key in r.status("main")]


def test_every_name_of_a_local_store_shares_its_staging(tmp_path):
    """A store named through a symlink, with '..' or as a file:// URL is the same store:
    before, each name had a workspace of its own, so a file staged through one name
    (a mount) was not there for a commit through another ('nothing to commit'), nor for
    garbage collection's look at this host's staging."""
    (tmp_path / "disk").mkdir()
    os.symlink(tmp_path / "disk", tmp_path / "link")
    real, state = str(tmp_path / "disk" / "store"), str(tmp_path / "state")
    Repository.init(real, state, settings=small_settings()).close()
    with Repository.open(str(tmp_path / "link" / "store"), state) as r:
        r.write_file("main", "through-the-link", io.BytesIO(b"x"))
    for name in (real, f"file://{tmp_path}/link/store", f"{tmp_path}/link/../disk/store"):
        assert _staged(name, state) == [b"through-the-link"], name
    assert len(os.listdir(os.path.join(state, "repos"))) == 1


def test_a_workspace_made_under_another_name_is_found(tmp_path, caplog):
    """Workspaces made before store URLs were real paths (named by a symlinked path) are
    used by every name of the store; of several, one is used and the others named."""
    (tmp_path / "disk").mkdir()
    os.symlink(tmp_path / "disk", tmp_path / "link")
    real, state = str(tmp_path / "disk" / "store"), str(tmp_path / "state")
    Repository.init(real, state, settings=small_settings()).close()
    with Repository.open(real, state) as r:
        r.write_file("main", "staged-long-ago", io.BytesIO(b"x"))
        ws = r.workspace.root
    old_url = f"file://{tmp_path}/link/store"  # what an older gravfs named it by
    old = os.path.join(os.path.dirname(ws), hashing.hexdigest(old_url.encode())[:16])
    os.rename(ws, old)
    with open(os.path.join(old, "store-url"), "w") as f:
        f.write(old_url + "\n")
    for name in (real, str(tmp_path / "link" / "store")):
        assert _staged(name, state) == [b"staged-long-ago"], name
    assert os.listdir(os.path.dirname(ws)) == [os.path.basename(old)]
    # a second one for the same store (made by hand here): the first by name, and a warning
    other = os.path.join(os.path.dirname(ws), "0" * 16)
    os.makedirs(other)
    with open(os.path.join(other, "store-url"), "w") as f:
        f.write(f"{tmp_path}/disk/./store\n")
    with caplog.at_level(logging.WARNING, logger="gravfs.version.config"):
        with Repository.open(real, state) as r:
            assert r.workspace.root == other
    assert any("all belong to the store" in m.getMessage() and old in m.getMessage()
               for m in caplog.records)


def test_init_sets_an_earlier_repositorys_workspace_aside(tmp_path, caplog):
    """A store deleted and made again by init: this host's workspace held the old
    repository's staging (a file whose object and base commit the new one does not
    have: 'commit ... not found' on the next commit). It is kept under another name."""
    import shutil

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    with Repository.open(store, state) as r:
        r.write_file("main", "old-file", io.BytesIO(b"x"))
        ws = r.workspace.root
    asides = []
    for _ in range(2):
        shutil.rmtree(store)
        with caplog.at_level(logging.WARNING, logger="gravfs.version.repository"):
            Repository.init(store, state, settings=small_settings()).close()
        assert _staged(store, state) == []
        asides = sorted(n for n in os.listdir(os.path.dirname(ws)) if n != os.path.basename(ws))
        assert all(n.startswith(os.path.basename(ws) + ".earlier-") for n in asides)
    assert len(asides) == 2  # two inits in one second: two names
    with Repository.open(store, state) as r:  # the new workspace is the store's now
        assert r.workspace.root == ws
    first = os.path.join(os.path.dirname(ws), asides[0])
    assert os.path.isdir(os.path.join(first, "staging"))  # kept: nothing deleted
    assert any("held an earlier repository's state" in m.getMessage() and first in m.getMessage()
               for m in caplog.records)


def test_a_workspace_of_a_repository_made_again_elsewhere_is_refused(tmp_path):
    """Another host deleted the store and made it again: this host's workspace names the
    earlier repository, and opening says so rather than mixing its staging in."""
    import shutil

    from gravfs.errors import GravfsError

    store = str(tmp_path / "store")
    here, there = str(tmp_path / "here"), str(tmp_path / "there")
    Repository.init(store, here, settings=small_settings()).close()
    with Repository.open(store, here) as r:
        r.write_file("main", "staged-here", io.BytesIO(b"x"))
        ws = r.workspace.root
    shutil.rmtree(store)
    Repository.init(store, there, settings=small_settings()).close()
    with pytest.raises(GravfsError, match="holds the state of an earlier repository") as e:
        Repository.open(store, here)
    assert ws in str(e.value)
    assert os.path.isdir(os.path.join(ws, "staging"))
    assert _staged(store, there) == []


def test_a_repository_gone_from_where_this_host_had_it(tmp_path):
    """No repository where this host's workspace saw one: a store moved or unmounted,
    which 'run gravfs init' would paper over with an empty one."""
    from gravfs.errors import NotFoundError, StoreUnavailableError

    store, state = str(tmp_path / "disk" / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    os.rename(tmp_path / "disk", tmp_path / "moved")
    with pytest.raises(StoreUnavailableError, match="where this host had one"):
        Repository.open(store, state)
    with pytest.raises(NotFoundError, match="run 'gravfs init'"):
        Repository.open(str(tmp_path / "never"), state)


def test_processes_opening_a_workspace_at_once_all_claim_it(tmp_path):
    """The first opens of a workspace record its repository; many at once (a mount, the
    commands, Spark's workers) never see each other's half-written record."""
    from concurrent.futures import ProcessPoolExecutor

    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    with Repository.open(store, state) as r:
        ws = r.workspace.root
    for _ in range(5):
        os.unlink(os.path.join(ws, "repo-id"))  # as a workspace of an older gravfs
        with ProcessPoolExecutor(4) as pool:
            assert list(pool.map(_open_and_close, [(store, state)] * 8)) == [ws] * 8


def _open_and_close(args) -> str:
    with Repository.open(*args) as r:
        return r.workspace.root
