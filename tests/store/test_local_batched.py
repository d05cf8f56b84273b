"""The opt-in bulk-writing local stores (gravfs import, Spark tasks): what is visible
and durable when."""

from __future__ import annotations

import os

from gravfs.store.local import DeferredLocalStore, LocalStore


def _temps(root: str) -> list[str]:
    return [n for _, _, files in os.walk(root) for n in files if n.startswith(".gravfs-tmp")]


def test_deferred_objects_are_visible_only_once_published(tmp_path, monkeypatch):
    import gravfs.store.local as local

    root = str(tmp_path / "store")
    LocalStore(root).put("x", b"x")
    synced = []
    monkeypatch.setattr(local, "_syncfs", lambda r: synced.append(r) or True)
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real(fd))
    s = DeferredLocalStore(root)
    src = tmp_path / "f"
    src.write_bytes(b"uploaded")
    s.put("data/ab/one", b"one")
    s.upload("data/cd/two", str(src))
    assert fsyncs == []  # nothing synced object by object
    assert s.size("data/ab/one") is None and LocalStore(root).size("data/cd/two") is None
    assert s.claim_existing("data/ab/one")  # dedup within the writer sees it
    assert len(_temps(root)) == 2
    assert synced == []
    assert s.publish() == 2
    assert len(synced) == 2  # the bytes, then the names
    assert LocalStore(root).get("data/ab/one") == b"one"
    assert LocalStore(root).get("data/cd/two") == b"uploaded"
    assert _temps(root) == [] and s.publish() == 0


def test_discarded_objects_leave_no_temp_files_even_from_a_late_writer(tmp_path):
    root = str(tmp_path / "store")
    s = DeferredLocalStore(root)
    s.put("data/ab/kept", b"kept")
    s.publish()
    s.put("data/ab/one", b"one")
    s.put("data/cd/two", b"two")
    assert len(_temps(root)) == 2
    assert s.discard() == 2
    assert _temps(root) == []
    s.put("data/ef/late", b"late")  # a worker its pool did not wait for
    assert _temps(root) == [] and s.publish() == 0
    assert s.size("data/ab/one") is None and s.size("data/ef/late") is None
    assert LocalStore(root).get("data/ab/kept") == b"kept"


def test_a_taken_file_waits_for_publish_like_an_upload(tmp_path, monkeypatch):
    """take_file renames the scratch file beside the object, unsynced: it is visible,
    synced, once published, and no copy was made (the same inode)."""
    import gravfs.store.local as local

    root = str(tmp_path / "store")
    LocalStore(root).put("x", b"x")
    synced = []
    monkeypatch.setattr(local, "_syncfs", lambda r: synced.append(r) or True)
    s = DeferredLocalStore(root)
    src = tmp_path / "scratch"
    src.write_bytes(b"taken")
    ino = os.stat(src).st_ino
    s.take_file("data/ef/three", str(src))
    assert not src.exists() and LocalStore(root).size("data/ef/three") is None
    assert synced == [] and s.publish() == 1 and len(synced) == 2
    assert LocalStore(root).get("data/ef/three") == b"taken"
    assert os.stat(os.path.join(root, "data/ef/three")).st_ino == ino
