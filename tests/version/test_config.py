"""gravfs.version.config: one workspace per store, whatever path names it."""

from __future__ import annotations

import io
import logging
import os

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
