"""LocalTier: single-flight fetches, pinning vs eviction, re-adoption, verification."""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
import time
from array import array

import pytest

from gravfs.data import chunksums
from gravfs.data.objects import hash_file
from gravfs.errors import CorruptDataError, GravfsError, NotFoundError
from gravfs.store.local import LocalStore
from gravfs.store.tier import SUMS_MIN, LocalTier


class CountingStore(LocalStore):
    """A real LocalStore that counts downloads and can slow them down."""

    def __init__(self, root: str, delay: float = 0.0):
        super().__init__(root)
        self.delay = delay
        self.downloads: list[str] = []
        self._count_lock = threading.Lock()

    def download(self, key: str, dest_path: str) -> int:
        with self._count_lock:
            self.downloads.append(key)
        time.sleep(self.delay)
        return super().download(key, dest_path)


def put_blob(store, data: bytes) -> str:
    h = hashlib.sha256(data).hexdigest()
    key = f"data/{h[:2]}/{h}"
    store.put(key, data)
    return key


def sha_verify(calls: list | None = None):
    """A data-object verifier: the name is the content's SHA-256; returns chunk sums."""
    def verify(path: str) -> array:
        if calls is not None:
            calls.append(path)
        sums = array("I")
        if hash_file(path, sums=sums)[0] != os.path.basename(path):
            raise CorruptDataError("content does not match its hash", path=path)
        return sums

    return verify


@pytest.fixture
def store(tmp_path):
    return CountingStore(str(tmp_path / "store"))


def test_acquire_reads_and_mmaps(store, tmp_path):
    key = put_blob(store, b"hello tier" * 100)
    tier = LocalTier(store, str(tmp_path / "cache"))
    with tier.acquire(key) as h:
        assert h.size == 1000
        assert open(h.path, "rb").read() == b"hello tier" * 100
        mm = h.mmap()
        assert mm is h.mmap()  # one mapping per handle
        assert mm[:10] == b"hello tier"
        assert h.read(6, 4) == b"tier"
    assert h.released
    assert mm[-4:] == b"tier"  # the mapping outlives the handle
    assert h.mmap() is mm
    h2 = tier.acquire(key)
    h2.release()
    with pytest.raises(GravfsError):
        h2.mmap()  # never mapped while pinned
    assert tier.stats.fetches == 1 and tier.stats.bytes_fetched == 1000 and tier.stats.hits == 1


def test_concurrent_acquire_fetches_once(tmp_path):
    store = CountingStore(str(tmp_path / "store"), delay=0.3)
    payload = os.urandom(200_000)
    key = put_blob(store, payload)
    tier = LocalTier(store, str(tmp_path / "cache"))
    barrier = threading.Barrier(16)
    handles = [None] * 16
    calls: list = []

    def worker(i):
        barrier.wait()
        handles[i] = tier.acquire(key, verify=sha_verify(calls))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.downloads == [key]
    assert tier.stats.fetches == 1
    assert len(calls) == 1  # verified once, not once per thread
    assert {h.path for h in handles} == {handles[0].path}
    assert all(bytes(h.mmap()) == payload for h in handles)
    for h in handles:
        h.release()
    assert os.listdir(tmp_path / "cache" / "tmp") == []


def test_concurrent_acquire_fetches_once_from_s3(s3_store, tmp_path):
    key = put_blob(s3_store, os.urandom(100_000))
    tier = LocalTier(s3_store, str(tmp_path / "cache"))
    barrier = threading.Barrier(16)
    paths = []

    def worker():
        barrier.wait()
        with tier.acquire(key, verify=sha_verify()) as h:
            paths.append(h.path)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(paths) == 16
    assert tier.stats.fetches == 1
    assert tier.stats.hits == 15


def test_missing_object_fails_every_waiter(tmp_path):
    store = CountingStore(str(tmp_path / "store"), delay=0.2)
    tier = LocalTier(store, str(tmp_path / "cache"))
    errors = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        try:
            tier.acquire("data/00/missing")
        except NotFoundError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 8
    assert store.downloads == ["data/00/missing"]
    assert os.listdir(tmp_path / "cache" / "tmp") == []
    assert not tier.cached("data/00/missing")


def test_refs_are_refused(store, tmp_path):
    tier = LocalTier(store, str(tmp_path / "cache"))
    with pytest.raises(GravfsError):
        tier.acquire("_gravfs/refs/branches/main")


def test_budget_eviction_keeps_pinned(store, tmp_path):
    keys = [put_blob(store, bytes([i]) * 1000) for i in range(8)]
    tier = LocalTier(store, str(tmp_path / "cache"), budget_bytes=3000)
    pinned = tier.acquire(keys[0])
    for k in keys[1:]:
        tier.acquire(k).release()
        assert tier.total_bytes <= 3000
        assert os.path.exists(pinned.path), "a pinned file was evicted"
    assert tier.cached(keys[0])
    assert tier.cached(keys[-1]) and tier.cached(keys[-2])
    assert not tier.cached(keys[1])
    assert tier.stats.evictions == 5
    assert bytes(pinned.mmap()) == bytes([0]) * 1000
    pinned.release()
    # LRU: the most recently used survive, and the re-used one counts as recent.
    tier.acquire(keys[-2]).release()
    tier.acquire(keys[1]).release()
    assert tier.cached(keys[-2]) and tier.cached(keys[1])
    assert not tier.cached(keys[0])


def test_cached_path_names_a_held_copy_and_counts_as_a_use(store, tmp_path):
    keys = [put_blob(store, bytes([i]) * 1000) for i in range(3)]
    tier = LocalTier(store, str(tmp_path / "cache"), budget_bytes=3000)
    assert tier.cached_path(keys[0]) is None  # not fetched by asking
    for k in keys:
        tier.acquire(k).release()
    path = tier.cached_path(keys[0])
    with open(path, "rb") as f:
        assert f.read() == bytes([0]) * 1000
    tier.acquire(put_blob(store, b"\xff" * 1000)).release()  # one must go: not the one used
    assert tier.cached(keys[0]) and not tier.cached(keys[1])
    assert store.downloads.count(keys[0]) == 1


def test_over_budget_while_all_pinned(store, tmp_path):
    keys = [put_blob(store, bytes([i]) * 1000) for i in range(5)]
    tier = LocalTier(store, str(tmp_path / "cache"), budget_bytes=2500)
    handles = [tier.acquire(k) for k in keys]
    assert tier.total_bytes == 5000  # nothing evictable
    assert all(os.path.exists(h.path) for h in handles)
    for h in handles:
        h.release()
    assert tier.total_bytes <= 2500
    assert [tier.cached(k) for k in keys] == [False, False, False, True, True]


def test_evicted_file_stays_readable_through_mmap(store, tmp_path):
    keys = [put_blob(store, bytes([i]) * 4096) for i in range(3)]
    tier = LocalTier(store, str(tmp_path / "cache"), budget_bytes=4096)
    h = tier.acquire(keys[0])
    mm = h.mmap()
    path = h.path
    h.release()
    tier.acquire(keys[1]).release()  # evicts keys[0]
    assert not os.path.exists(path)
    assert mm[:4096] == bytes([0]) * 4096
    with tier.acquire(keys[0]) as again:  # fetched anew
        assert again.read() == bytes([0]) * 4096
    assert store.downloads.count(keys[0]) == 2


def test_readoption_after_restart(store, tmp_path):
    keys = [put_blob(store, os.urandom(1000 + i)) for i in range(4)]
    cache = str(tmp_path / "cache")
    tier = LocalTier(store, cache)
    for k in keys:
        tier.acquire(k).release()
    total = tier.total_bytes
    # Leftovers of a crashed download, and a live one of another process.
    stale = os.path.join(cache, "tmp", "999999-dead.part")
    open(stale, "wb").write(b"partial")
    live = os.path.join(cache, "tmp", "1-live.part")
    live_fd = os.open(live, os.O_WRONLY | os.O_CREAT)
    fcntl.flock(live_fd, fcntl.LOCK_EX)
    try:
        tier2 = LocalTier(store, cache)
        assert not os.path.exists(stale)
        assert os.path.exists(live)
    finally:
        os.close(live_fd)
    assert tier2.total_bytes == total
    assert all(tier2.cached(k) for k in keys)
    n = len(store.downloads)
    for k in keys:
        with tier2.acquire(k, verify=sha_verify()) as h:
            assert h.read() == store.get(k)
    assert len(store.downloads) == n  # all served from disk
    assert tier2.stats.fetches == 0 and tier2.stats.hits == 4
    # A smaller budget on restart trims the adopted set.
    tier3 = LocalTier(store, cache, budget_bytes=2100)
    assert tier3.total_bytes <= 2100


def test_corrupt_cached_file_is_refetched(store, tmp_path):
    payload = os.urandom(5000)
    key = put_blob(store, payload)
    cache = str(tmp_path / "cache")
    with LocalTier(store, cache).acquire(key, verify=sha_verify()) as h:
        path = h.path
    with open(path, "r+b") as f:  # flip one byte of the cached copy
        f.seek(1234)
        b = f.read(1)
        f.seek(1234)
        f.write(bytes([b[0] ^ 0xFF]))
    calls: list = []
    tier = LocalTier(store, cache)
    with tier.acquire(key, verify=sha_verify(calls)) as h:
        assert h.read() == payload
    assert tier.stats.verify_failures == 1
    assert tier.stats.fetches == 1
    assert len(calls) == 2  # the bad copy, then the fresh one
    with tier.acquire(key, verify=sha_verify(calls)) as h:
        assert h.read() == payload
    assert len(calls) == 2  # verified once per process
    assert tier.stats.fetches == 1


def _count_fsyncs(monkeypatch) -> list[int]:
    """The descriptors os.fsync is called on from now on (it still syncs)."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    return synced


def test_copies_not_durable_are_not_synced_and_a_torn_one_is_fetched_again(store, tmp_path,
                                                                         monkeypatch):
    """durable=False skips the fsync of a fetched copy that is checked in full (or by its
    user) after a crash; a copy that a crash left torn is unverified when adopted, so it
    is fetched again."""
    payload = os.urandom(5000)
    key = put_blob(store, payload)
    cache = str(tmp_path / "cache")
    synced = _count_fsyncs(monkeypatch)
    with LocalTier(store, cache).acquire(key, verify=sha_verify(), durable=False) as h:
        path = h.path
    assert synced == []
    with open(path, "r+b") as f:  # what a power cut can leave of an unsynced file
        f.truncate(1000)
    tier = LocalTier(store, cache)
    with tier.acquire(key, verify=sha_verify(), durable=False) as h:
        assert h.read() == payload
    assert tier.stats.verify_failures == 1 and tier.stats.fetches == 1
    # without a full verify the copy is synced whatever is asked
    other = put_blob(store, os.urandom(3000))
    synced.clear()
    tier.acquire(other, durable=False).release()
    assert len(synced) == 1
    # chunk-checked: synced when it may get chunk sums (SUMS_MIN bytes or more), which
    # a later process may serve it by; a smaller one is checked in full after a crash
    small, big = put_blob(store, os.urandom(3001)), put_blob(store, os.urandom(SUMS_MIN))
    synced.clear()
    with tier.acquire(small, verify=sha_verify(), chunk_checked=True, durable=False) as h:
        path = h.path
    assert synced == []
    tier.acquire(big, verify=sha_verify(), chunk_checked=True, durable=False).release()
    assert len(synced) >= 1
    with open(path, "r+b") as f:  # torn by a power cut
        f.truncate(1000)
    again = LocalTier(store, cache)
    with again.acquire(small, verify=sha_verify(), chunk_checked=True, durable=False) as h:
        assert h.read() == store.get(small)
    assert again.stats.verify_failures == 1 and again.stats.fetches == 1


def test_self_checked_copies_are_served_unverified_and_dropped_when_refused(store, tmp_path,
                                                                          monkeypatch):
    """self_checked (SST readers, which check each block they read): no full verify,
    no sync; a reader that refuses the copy drops it and acquires again with verify."""
    payload = os.urandom(5000)
    key = put_blob(store, payload)
    cache = str(tmp_path / "cache")
    synced = _count_fsyncs(monkeypatch)
    tier = LocalTier(store, cache)
    with tier.acquire(key, self_checked=True, durable=False) as h:
        path = h.path
        assert h.read() == payload
    assert synced == [] and tier.stats.fetches == 1
    with open(path, "r+b") as f:  # damaged after the fetch
        f.write(b"\0" * 10)
    calls: list = []
    tier2 = LocalTier(store, cache)
    with tier2.acquire(key, self_checked=True, durable=False) as h:
        assert h.read(0, 10) == b"\0" * 10  # served as it is: the reader checks it
    assert calls == [] and tier2.stats.fetches == 0
    tier2.discard(key, corrupt="block 0 checksum mismatch")
    assert tier2.stats.verify_failures == 1 and not tier2.cached(key)
    with tier2.acquire(key, verify=sha_verify(calls), durable=False) as h:
        assert h.read() == payload
    assert len(calls) == 1 and tier2.stats.fetches == 1
    with pytest.raises(ValueError, match="no verify"):
        tier2.acquire(key, verify=sha_verify(), self_checked=True)


def test_corrupt_in_store_propagates_after_one_retry(store, tmp_path):
    key = "data/ff/" + "f" * 64  # name does not match content
    store.put(key, b"not what the name says")
    tier = LocalTier(store, str(tmp_path / "cache"))
    with pytest.raises(CorruptDataError, match=f"^{key} in the store is damaged "
                       r"\(content does not match its hash\)"):
        tier.acquire(key, verify=sha_verify())
    assert store.downloads == [key, key]
    assert not tier.cached(key)
    assert not os.path.exists(os.path.join(tmp_path, "cache", "objects", *key.split("/")))
    assert tier.stats.verify_failures == 2


def test_prefetch_and_discard(store, tmp_path):
    key = put_blob(store, b"x" * 300)
    tier = LocalTier(store, str(tmp_path / "cache"))
    tier.prefetch(key).result(timeout=10)
    assert tier.cached(key)
    with tier.acquire(key) as h:
        assert h.read() == b"x" * 300
        tier.discard(key)  # holder keeps reading its open file
        assert h.read() == b"x" * 300
    assert not tier.cached(key)
    assert tier.stats.fetches == 1 and tier.stats.hits == 1
    tier.close()


# --- chunk sums: later processes check chunks as they read ------------------------

BIG = 20 * 1024 * 1024 + 123  # over SUMS_MIN, a partial last chunk


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


@pytest.fixture
def big_cached(store, tmp_path):
    """A big object verified by a first tier (which records its chunk sums)."""
    payload = os.urandom(BIG)
    key = put_blob(store, payload)
    cache = str(tmp_path / "cache")
    with LocalTier(store, cache, sums=chunksums).acquire(key, verify=sha_verify()) as h:
        path = h.path
    assert os.path.exists(os.path.join(cache, "sums", *key.split("/")))
    return key, payload, cache, path


def test_chunk_checked_reads_skip_the_full_verify(store, big_cached):
    key, payload, cache, _path = big_cached
    calls: list = []
    tier = LocalTier(store, cache, sums=chunksums)
    with tier.acquire(key, verify=sha_verify(calls), chunk_checked=True) as h:
        mb = 1 << 20
        for off, n in [(0, mb), (5 * mb - 7, 3 * mb), (BIG - 200, 1000), (BIG, 10), (123, 1)]:
            assert h.read(off, n) == payload[off:off + n]
        fd = os.open(h.path, os.O_RDONLY)
        try:
            assert h.read(3 * mb, 2 * mb, fd=fd) == payload[3 * mb:5 * mb]
        finally:
            os.close(fd)
        with pytest.raises(GravfsError, match="no mapping"):
            h.mmap()
    assert calls == []  # no full hash in this process
    assert store.downloads == [key]  # and no new download


def test_chunk_check_catches_a_damaged_copy_and_refetches(store, big_cached):
    key, payload, cache, path = big_cached
    _flip(path, 7 * (1 << 20) + 99)
    calls: list = []
    tier = LocalTier(store, cache, sums=chunksums)
    h = tier.acquire(key, verify=sha_verify(calls), chunk_checked=True)
    assert h.read(0, 1 << 20) == payload[:1 << 20]  # chunks before the damage are fine
    with pytest.raises(CorruptDataError, match="chunk sum"):
        h.read(6 << 20, 2 << 20)
    h.release()
    assert tier.stats.verify_failures == 1 and not tier.cached(key)
    with tier.acquire(key, verify=sha_verify(calls), chunk_checked=True) as h:
        assert h.read(0, BIG) == payload
    assert len(calls) == 1  # the fresh copy was hashed whole
    assert store.downloads == [key, key]


def test_full_verify_without_chunk_checks_or_with_bad_sums(store, big_cached):
    key, payload, cache, _path = big_cached
    calls: list = []
    with LocalTier(store, cache, sums=chunksums).acquire(key, verify=sha_verify(calls)) as h:  # mmap users
        assert bytes(h.mmap()[:10]) == payload[:10]
    assert len(calls) == 1
    sums = os.path.join(cache, "sums", *key.split("/"))
    _flip(sums, 30)
    with LocalTier(store, cache, sums=chunksums).acquire(key, verify=sha_verify(calls), chunk_checked=True) as h:
        assert h.read(0, 100) == payload[:100]
    assert len(calls) == 2  # damaged sums are ignored, and rewritten
    calls.clear()
    with LocalTier(store, cache, sums=chunksums).acquire(key, verify=sha_verify(calls), chunk_checked=True) as h:
        assert h.read(BIG - 5, 5) == payload[-5:]
    assert calls == []


def test_evicting_a_file_removes_its_sums(store, big_cached):
    key, _payload, cache, _path = big_cached
    tier = LocalTier(store, cache)
    tier.discard(key)
    assert not os.path.exists(os.path.join(cache, "sums", *key.split("/")))


def test_chunk_checks_of_data_read_elsewhere():
    """ChunkChecks.check: sums describe content, so they check bytes from any source."""
    data = os.urandom(3 * chunksums.CHUNK + 10)
    sums = array("I", (chunksums.crc(data[i:i + chunksums.CHUNK])
                       for i in range(0, len(data), chunksums.CHUNK)))
    checks = chunksums.ChunkChecks(sums, chunksums.CHUNK, len(data))
    checks.check(chunksums.CHUNK, data[chunksums.CHUNK:])  # the last three chunks, one call
    assert list(checks.checked) == [0, 1, 1, 1]
    bad = bytearray(data[:2 * chunksums.CHUNK])
    bad[chunksums.CHUNK + 7] ^= 1
    with pytest.raises(chunksums.ChunkMismatch) as exc:
        checks.check(0, bytes(bad))
    assert exc.value.index == 1
    with pytest.raises(chunksums.ChunkMismatch):
        checks.check(3 * chunksums.CHUNK, data[3 * chunksums.CHUNK:-1])  # short last chunk
    with pytest.raises(ValueError):
        checks.check(5, data[5:100])


def test_tier_copies_are_private(tmp_path):
    """Cached copies (and chunk sums) are 0600 in 0700 directories under umask 022, so
    another uid cannot read a cached object; a tier an older gravfs left open is tightened."""
    import shutil

    from gravfs.store.tier import SUMS_MIN
    from tests.modes_util import NOBODY, loose_entries, open_base, readable_by

    store = LocalStore(str(tmp_path / "store"))
    key = put_blob(store, b"secret content")
    base = open_base()
    old = os.umask(0o022)
    try:
        cache = os.path.join(base, "cache")
        tier = LocalTier(store, cache, sums=chunksums)
        with tier.acquire(key) as h:
            cached = h.path
        tier.keep_sums("data/ff/big", SUMS_MIN, array("I", [0] * (SUMS_MIN // chunksums.CHUNK)))
        assert os.path.exists(os.path.join(cache, "sums", "data", "ff", "big"))
        assert loose_entries(cache) == []
        assert not readable_by(NOBODY, cached)
        # an older tier: objects 0644 in 0755 directories
        for d in ("", "objects", "tmp", "sums"):
            os.chmod(os.path.join(cache, d), 0o755)
        LocalTier(store, cache)
        assert [oct(os.stat(os.path.join(cache, d)).st_mode & 0o777)
                for d in ("", "objects", "tmp", "sums")] == ["0o700"] * 4
    finally:
        os.umask(old)
        shutil.rmtree(base)


def test_a_written_file_is_kept_verified_without_a_fetch(store, tmp_path):
    """add_written: what this process just stored is linked in, counted as verified."""
    data = os.urandom(5000)
    src = tmp_path / "written.sst"
    src.write_bytes(data)
    os.chmod(src, 0o644)  # written under a loose umask
    key = put_blob(store, data)
    tier = LocalTier(store, str(tmp_path / "cache"))
    linked = tier.add_written(key, str(src))
    assert linked is not None and linked[0] == key
    assert os.stat(tier._path(key)).st_mode & 0o007 == 0  # others out, as from every copy
    calls: list = []
    with tier.acquire(key, verify=sha_verify(calls)) as h:
        assert h.read() == data
    assert store.downloads == [] and calls == [] and tier.stats.fetches == 0
    assert os.stat(tier._path(key)).st_ino == os.stat(src).st_ino  # a link, not a copy
    assert tier.add_written(key, str(src)) is None  # already kept
    assert tier.total_bytes == len(data)


def test_another_process_link_is_adopted_only_while_it_is_the_same_file(store, tmp_path):
    data = [os.urandom(3000 + i) for i in range(3)]
    keys = [put_blob(store, d) for d in data]
    cache = str(tmp_path / "cache")
    worker = LocalTier(store, cache)      # a worker process's view of the shared tier
    driver = LocalTier(store, cache)
    linked = []
    for i, d in enumerate(data):
        src = tmp_path / f"w{i}.sst"
        src.write_bytes(d)
        linked.append(worker.add_written(keys[i], str(src)))
    # The worker's copy of keys[1] was evicted and another process fetched it again:
    # a new file the driver knows nothing about (it may not be verified yet).
    worker.discard(keys[1])
    other = LocalTier(store, cache)
    other.acquire(keys[1]).release()
    # keys[2]'s copy is gone altogether.
    worker.discard(keys[2])
    assert driver.adopt_linked(linked) == 1
    calls: list = []
    with driver.acquire(keys[0], verify=sha_verify(calls)) as h:
        assert h.read() == data[0]
    assert calls == []
    for k in keys[1:]:
        with driver.acquire(k, verify=sha_verify(calls)) as h:
            assert h.read() == store.get(k)
    assert len(calls) == 2  # not adopted: verified as any cached copy is


def test_a_copy_another_process_left_is_taken_in_and_checked_without_a_fetch(store, tmp_path):
    """A tier misses a key whose copy another process of the tier made since (a
    command's commit keeps what it uploaded): that copy is checked and served, not
    fetched again; a damaged one is dropped and fetched."""
    cache = str(tmp_path / "cache")
    daemon = LocalTier(store, cache)  # indexed the directory before the others came
    good, bad = os.urandom(6000), os.urandom(7000)
    keys = [put_blob(store, good), put_blob(store, bad)]
    other = LocalTier(store, cache)
    for k in keys:
        other.acquire(k, verify=sha_verify()).release()
    assert len(store.downloads) == 2
    _flip(other._path(keys[1]), 100)
    calls: list = []
    with daemon.acquire(keys[0], verify=sha_verify(calls)) as h:
        assert h.read() == good
    assert len(calls) == 1 and daemon.stats.fetches == 0 and daemon.stats.hits == 1
    assert len(store.downloads) == 2
    with daemon.acquire(keys[1], verify=sha_verify(calls)) as h:
        assert h.read() == bad
    assert daemon.stats.verify_failures == 1 and daemon.stats.fetches == 1
    assert len(store.downloads) == 3
    assert daemon.total_bytes == len(good) + len(bad)


def _resident(path: str) -> int:
    """Bytes of ``path`` in the page cache (util-linux's fincore)."""
    import subprocess
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True,
                         text=True, check=True).stdout
    return int(out.strip())


def test_will_need_reads_a_part_into_the_page_cache_without_a_read(store, tmp_path):
    key = put_blob(store, os.urandom(1 << 20))
    tier = LocalTier(store, str(tmp_path / "cache"))
    with tier.acquire(key) as h:
        fd = os.open(h.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # (dirty pages are not dropped)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        if _resident(h.path):
            pytest.skip("this filesystem keeps its pages (tmpfs): nothing to read back in")
        h.will_need(768 << 10)  # the last quarter
        deadline = time.monotonic() + 10
        while _resident(h.path) < 256 << 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert 256 << 10 <= _resident(h.path) < 1 << 20
    with pytest.raises(GravfsError):
        h.will_need()  # released
