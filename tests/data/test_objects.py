"""gravfs.data.objects: hashing local files, and pending uploads into a local store
and into S3 (the real server), where an uploaded file stays in the tier."""

from __future__ import annotations

import hashlib
import os
import threading
from array import array

import pytest

from gravfs import hashing
from gravfs.data import chunksums, sparse
from gravfs.data.objects import (KEEP_WRITTEN_SHARE, DataObjects, address_of, digest_of,
                                   hash_file)
from gravfs.store.local import LocalStore
from gravfs.store.tier import LocalTier


def _streamed(path: str) -> tuple[str, int, array]:
    sums = array("I")
    digest, size = hash_file(path, sums=sums)
    return digest, size, sums


@pytest.mark.parametrize("size", [0, 1, 4096, chunksums.CHUNK - 1, chunksums.CHUNK,
                                  chunksums.CHUNK + 1])
def test_a_size_hint_gives_the_streamed_digest_size_and_sums(tmp_path, size):
    path = str(tmp_path / "f")
    data = os.urandom(size)
    with open(path, "wb") as f:
        f.write(data)
    want = _streamed(path)
    assert want[:2] == (hashlib.sha256(data).hexdigest(), size)
    fd = os.open(path, os.O_RDONLY)
    try:
        sums = array("I")
        assert hash_file(path, fd, sums, size_hint=size) == want[:2]
        assert sums == want[2]
    finally:
        os.close(fd)


def test_a_stale_size_hint_still_hashes_the_whole_file(tmp_path):
    """The hint is the size a stat gave; a file that grew since is hashed to its end."""
    path = str(tmp_path / "f")
    data = os.urandom(10_000)
    with open(path, "wb") as f:
        f.write(data)
    sums = array("I")
    assert hash_file(path, sums=sums, size_hint=4096) == (hashlib.sha256(data).hexdigest(),
                                                           len(data))
    assert sums == _streamed(path)[2]


def _pending_objects(tmp_path, store) -> DataObjects:
    return DataObjects(store, None, str(tmp_path / "tmp"), pending_dir=str(tmp_path / "pending"))


def _pending_file(objects: DataObjects, data: bytes) -> tuple[str, str]:
    """(address, path) of a pending file holding data, as the mount's write-back leaves it."""
    address = address_of(hashing.hexdigest(data))
    pending = objects.pending_path(address)
    os.makedirs(os.path.dirname(pending), exist_ok=True)
    with open(pending, "wb") as f:
        f.write(data)
    return address, pending


def test_a_local_store_takes_the_pending_file_itself(tmp_path):
    """Write-back into a local directory store links the pending file into place:
    the object is that file (no copy), and the pending name is gone."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    objects = _pending_objects(tmp_path, store)
    local = str(tmp_path / "local")
    data = os.urandom(5000)
    with open(local, "wb") as f:
        f.write(data)
    address, size = objects.put_pending(local)  # no uploader: stored at once
    assert size == len(data) and store.get(address) == data
    # with a pending file, as the mount's write-back leaves it
    data2 = os.urandom(7000)
    address2, pending = _pending_file(objects, data2)
    ino = os.stat(pending).st_ino
    assert objects.upload_pending(address2)
    assert not os.path.exists(pending)
    assert store.get(address2) == data2
    assert os.stat(store.local_path(address2)).st_ino == ino  # the file itself, not a copy
    assert os.stat(store.local_path(address2)).st_nlink == 1


def test_an_object_being_uploaded_is_not_uploaded_again_by_a_drain(tmp_path):
    """A drain (a commit's) that comes to a pending object another uploader is sending
    waits for that upload and finds the name gone: the object goes up once."""
    import threading
    import time

    class SlowStore(LocalStore):
        calls = 0

        def put_file_if_absent(self, key, src_path):
            SlowStore.calls += 1
            time.sleep(0.5)  # a big object's upload
            return super().put_file_if_absent(key, src_path)

    store = SlowStore(str(tmp_path / "store"), fsync=False)
    data = os.urandom(9000)
    uploader, drain = _pending_objects(tmp_path, store), _pending_objects(tmp_path, store)
    address, pending = _pending_file(uploader, data)
    results = {}
    first = threading.Thread(target=lambda: results.update(uploader=uploader.upload_pending(address)))
    first.start()
    deadline = time.monotonic() + 10
    while SlowStore.calls == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    results["drain"] = drain.flush_pending()
    first.join()
    assert results == {"uploader": True, "drain": 0}
    assert SlowStore.calls == 1
    assert store.get(address) == data and not os.path.exists(pending)


def test_a_pending_file_whose_object_exists_is_dropped_and_the_object_kept(tmp_path):
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    objects = _pending_objects(tmp_path, store)
    data = os.urandom(3000)
    address = address_of(hashing.hexdigest(data))
    store.put(address, data)
    kept = os.stat(store.local_path(address)).st_ino
    _, pending = _pending_file(objects, data)
    assert objects.upload_pending(address)
    assert not os.path.exists(pending)
    assert os.stat(store.local_path(address)).st_ino == kept
    assert store.get(address) == data
    assert not objects.upload_pending(address)  # gone: another drainer took it


def test_an_upload_to_s3_stays_in_the_tier_as_a_verified_copy(tmp_path, s3_store):
    """Reading back what was just written costs no download: the uploaded pending file
    is the tier's copy (linked, counted as verified), unless it is too big a share of
    the tier's budget."""
    tier = LocalTier(s3_store, str(tmp_path / "cache"), budget_bytes=1 << 20)
    objects = DataObjects(s3_store, tier, str(tmp_path / "tmp"),
                          pending_dir=str(tmp_path / "pending"))
    small = os.urandom(5000)
    address, pending = _pending_file(objects, small)
    ino = os.stat(pending).st_ino
    assert objects.upload_pending(address)
    assert not os.path.exists(pending) and s3_store.get(address) == small
    assert tier.cached(address)
    assert os.stat(tier._path(address)).st_ino == ino  # the pending file itself
    assert objects.read(address) == small
    assert tier.stats.fetches == 0
    big = os.urandom((1 << 20) // KEEP_WRITTEN_SHARE + 1)  # over the share: not kept
    address, _ = _pending_file(objects, big)
    assert objects.upload_pending(address)
    assert not tier.cached(address)
    assert objects.read(address) == big
    assert tier.stats.fetches == 1


def test_an_upload_to_a_local_store_is_not_kept_in_the_tier(tmp_path):
    """The pending file is the store's own file now: a tier name of it would make a
    damaged tier copy (dropped and fetched again) a damaged store object."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    tier = LocalTier(store, str(tmp_path / "cache"))
    objects = DataObjects(store, tier, str(tmp_path / "tmp"), pending_dir=str(tmp_path / "pending"))
    address, _ = _pending_file(objects, os.urandom(3000))
    assert objects.upload_pending(address)
    assert not tier.cached(address) and tier.total_bytes == 0


def test_an_upload_whose_tier_copy_fails_still_ends(tmp_path, s3_store, monkeypatch, caplog):
    """Keeping the copy is a cache's business: when it fails, the upload stands and the
    pending name goes (else the uploader would retry that object for ever)."""
    tier = LocalTier(s3_store, str(tmp_path / "cache"))
    objects = DataObjects(s3_store, tier, str(tmp_path / "tmp"),
                          pending_dir=str(tmp_path / "pending"))

    def broken(key, src_path):
        raise RuntimeError("tier index broken")

    monkeypatch.setattr(tier, "add_written", broken)
    data = os.urandom(2000)
    address, pending = _pending_file(objects, data)
    assert objects.upload_pending(address)
    assert not os.path.exists(pending) and s3_store.get(address) == data
    assert "could not keep it in the local tier: tier index broken" in caplog.text


def test_the_uploader_makes_the_pending_subdirectories_ahead(tmp_path):
    """A close moves its file into pending/<2 hex digits>/: the 256 directories are
    made by a thread when the uploader starts, not by the first closes, and a put
    still works whatever that thread has done so far."""
    import time

    store = LocalStore(str(tmp_path / "store"), fsync=False)
    objects = _pending_objects(tmp_path, store)
    objects.start_uploader(workers=1)
    try:
        local = str(tmp_path / "local")
        with open(local, "wb") as f:
            f.write(b"x" * 100)
        address, _ = objects.put_pending(local)
        deadline = time.monotonic() + 30
        while len(os.listdir(objects.pending_dir)) < 256 and time.monotonic() < deadline:
            time.sleep(0.01)
        subs = sorted(os.listdir(objects.pending_dir))
        assert subs == ["%02x" % i for i in range(256)]
        assert all(os.stat(os.path.join(objects.pending_dir, s)).st_mode & 0o777 == 0o700
                   for s in subs)
    finally:
        objects.stop_uploader()
    assert store.get(address) == b"x" * 100


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"), fsync=False)
    return request.getfixturevalue("s3_store")


def _snapshot(objects: DataObjects, path) -> tuple[str, int]:
    with open(path, "rb") as f:
        return objects.put_snapshot(f.fileno())


def test_a_snapshot_is_stored_as_put_path_stores_the_same_bytes(tmp_path):
    """Same address and size as put_path, whatever the file's layout: small, big, a
    hole's worth of zeros written out, physical holes; the copy is read back whole and
    no scratch file is left."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    objects = DataObjects(store, LocalTier(store, str(tmp_path / "cache")),
                          str(tmp_path / "tmp"))
    os.makedirs(objects.tmp_dir)
    files = {"small": os.urandom(3000), "big": os.urandom(3 << 20),
             "zeros": os.urandom(1 << 20) + bytes(10 << 20) + os.urandom(5)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with open(tmp_path / "holes", "wb") as f:  # physical holes
        f.truncate(20 << 20)
        f.seek(12 << 20)
        f.write(b"tail")
    files["holes"] = bytes(12 << 20) + b"tail" + bytes((20 << 20) - (12 << 20) - 4)
    for name, data in files.items():
        got = _snapshot(objects, tmp_path / name)
        assert got == objects.put_path(str(tmp_path / name)) and got[1] == len(data), name
        assert objects.read(got[0]) == data, name
    assert sparse.is_sparse(_snapshot(objects, tmp_path / "zeros")[0])
    assert not os.listdir(objects.tmp_dir)


def test_a_file_rewritten_while_it_is_stored_never_gives_a_damaged_object(tmp_path,
                                                                          any_store):
    """A writer rewrites a 4 MiB file in place, one pattern after another, while it is
    stored 12 times: each stored object holds bytes that hash to its address (put_path
    read the file twice, to name it and to upload it, and published whatever was there
    at the second read under the first read's address)."""
    objects = DataObjects(any_store, None, str(tmp_path / "tmp"))
    os.makedirs(objects.tmp_dir)
    path = tmp_path / "busy"
    path.write_bytes(bytes(4 << 20))
    stop = threading.Event()

    def writer():
        fd = os.open(path, os.O_WRONLY)
        try:
            n = 0
            while not stop.is_set():
                n += 1
                os.pwrite(fd, bytes([n % 251 + 1]) * (4 << 20), 0)
        finally:
            os.close(fd)

    t = threading.Thread(target=writer)
    t.start()
    try:
        stored = {_snapshot(objects, path)[0] for _ in range(12)}
    finally:
        stop.set()
        t.join()
    for address in stored:
        assert hashing.hexdigest(any_store.get(address)) == digest_of(address)


@pytest.mark.parametrize("size", [1 << 20, 12 << 20], ids=["one-put", "multipart"])
def test_a_file_rewritten_after_it_was_named_is_stored_from_a_copy_on_s3(
        tmp_path, s3_server, monkeypatch, size):
    """On S3 the file is named, then uploaded read again and checked: rewritten in
    between, the upload stops before the object exists and a private copy is stored
    (whose address is its own bytes'); nothing is left under the first address."""
    import gravfs.data.objects as objects

    store = s3_server.make_store(multipart_threshold=5 << 20, multipart_chunksize=5 << 20)
    data = DataObjects(store, None, str(tmp_path / "tmp"))
    os.makedirs(data.tmp_dir)
    path = tmp_path / "f"
    first, second = os.urandom(size), os.urandom(size)
    path.write_bytes(first)
    real_plan = objects.plan_storage

    def plan_then_rewrite(fd, passed=None):
        plan = real_plan(fd, passed)
        path.write_bytes(second)
        return plan

    monkeypatch.setattr(objects, "plan_storage", plan_then_rewrite)
    address, n = _snapshot(data, path)
    assert (address, n) == (address_of(hashing.hexdigest(second)), size)
    assert store.get(address) == second
    assert store.size(address_of(hashing.hexdigest(first))) is None
    assert not os.listdir(data.tmp_dir)


def test_on_a_local_store_the_copy_is_made_in_the_store(tmp_path, monkeypatch):
    """The scratch copy is made on the store's file system and becomes the object (no
    second write, no space taken beside the state); none is left behind."""
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    data = DataObjects(store, None, str(tmp_path / "tmp"))
    os.makedirs(data.tmp_dir)
    made = []
    real = store.scratch_file
    monkeypatch.setattr(store, "scratch_file", lambda p: made.append(real(p)) or made[-1])
    payload = os.urandom(2 << 20)
    (tmp_path / "f").write_bytes(payload)
    address, _ = _snapshot(data, tmp_path / "f")
    (fd, scratch), = made
    assert scratch.startswith(store.root + "/")
    assert os.stat(os.path.join(store.root, address)).st_size == len(payload)
    assert not os.path.exists(scratch) and not os.listdir(data.tmp_dir)
    assert [n for _, _, fs in os.walk(store.root) for n in fs] == [digest_of(address)]


def test_a_writer_check_of_an_instant_does_not_fail_a_mount_starting(tmp_path):
    """writer_running takes the writer lock for an instant (a commit asks it); an
    uploader starting then (a mount) waits it out instead of failing as if a garbage
    collection held writers off. One that holds on (a collection's run) fails it."""
    import time
    from gravfs.errors import GravfsError
    store = LocalStore(str(tmp_path / "store"), fsync=False)
    pending = str(tmp_path / "pending")
    probe, mount = (DataObjects(store, None, str(tmp_path), pending_dir=pending)
                    for _ in range(2))
    started: dict = {}

    def start() -> None:
        try:
            mount.start_uploader(workers=1)
            started["ok"] = True
        except GravfsError as exc:
            started["err"] = exc

    with probe.writers_held_off(wait=0.0) as held:
        assert held
        t = threading.Thread(target=start)
        t.start()
        time.sleep(0.2)  # (a probe's instant, stretched)
    t.join()
    assert started == {"ok": True} and probe.writer_running()
    mount.stop_uploader(drain=False)
    assert not probe.writer_running()
    with probe.writers_held_off() as held:  # held for longer than the start waits
        assert held
        with pytest.raises(GravfsError, match="garbage collection with a minimum age"):
            mount.start_uploader(workers=1)
