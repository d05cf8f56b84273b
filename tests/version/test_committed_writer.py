"""Writing SSTs into the store: LocalStore takes the built file by hard link (one write, one sync)."""

from __future__ import annotations

import errno
import os

from gravfs.version.committed import BreakPolicy, CommittedManager, Record
from gravfs.version.committed.reader import range_key
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier


def test_put_file_if_absent_links_and_never_overwrites(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    src = tmp_path / "a.bin"
    src.write_bytes(b"first")
    assert store.put_file_if_absent("x/obj", str(src)) is True
    assert os.stat(src).st_ino == os.stat(store._path("x/obj")).st_ino  # linked, not copied
    other = tmp_path / "b.bin"
    other.write_bytes(b"second")
    assert store.put_file_if_absent("x/obj", str(other)) is False
    src.unlink()
    assert store.get("x/obj") == b"first"


def test_put_file_if_absent_copies_across_file_systems(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path / "store"))
    src = tmp_path / "a.bin"
    src.write_bytes(b"payload")

    real_link = os.link
    calls = []

    def link(a, b):
        calls.append(a)
        if a == str(src):
            raise OSError(errno.EXDEV, "cross-device link")
        return real_link(a, b)

    monkeypatch.setattr(os, "link", link)
    assert store.put_file_if_absent("y/obj", str(src)) is True  # copied via put_if_absent
    monkeypatch.undo()
    assert calls and calls[0] == str(src)
    assert store.get("y/obj") == b"payload"
    assert os.stat(src).st_ino != os.stat(store._path("y/obj")).st_ino
    assert not [n for n in os.listdir(os.path.dirname(store._path("y/obj"))) if n != "obj"]


def test_written_ranges_are_readable_and_temp_files_removed(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    tier = LocalTier(store, str(tmp_path / "cache"), 1 << 30)
    tmp = str(tmp_path / "sst-tmp")
    m = CommittedManager(store, tier, BreakPolicy(200, 2048, 8, seed=1), tmp_dir=tmp)
    recs = [Record(b"k%05d" % i, b"i" * 32, b"d" * 40) for i in range(600)]
    res = m.write_tree(recs)
    ranges = m.iter_ranges(res.metarange_id)
    assert res.stats.ranges_written == len(ranges) > 3
    for info in ranges:
        assert os.path.getsize(store._path(range_key(info.id))) == info.estimated_size
    assert os.listdir(tmp) == []
    assert list(m.iter(res.metarange_id)) == recs
    m.close()


def test_once_a_range_upload_failed_no_queued_one_starts(tmp_path):
    """A store that stopped answering fails each upload after its whole timeout: the
    uploads queued behind the failed ones must not start (each would wait it out too)."""
    import threading

    import pytest

    from gravfs.errors import StoreUnavailableError

    calls = []
    first_wave = threading.Barrier(2)

    class DownStore(LocalStore):
        def put_file_if_absent(self, key, path):
            calls.append(key)
            first_wave.wait(5)  # both upload threads in flight, as when the store stops
            raise StoreUnavailableError("put timed out after 60 s")

    store = DownStore(str(tmp_path / "store"))
    m = CommittedManager(store, None, BreakPolicy(200, 2048, 8, seed=1),
                         tmp_dir=str(tmp_path / "sst-tmp"), upload_threads=2)
    recs = [Record(b"k%05d" % i, b"i" * 32, b"d" * 40) for i in range(2000)]
    with pytest.raises(StoreUnavailableError, match="timed out"):
        m.write_tree(recs)
    assert len(calls) == 2
    m.close()
