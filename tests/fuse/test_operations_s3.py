"""The mount on a real S3 store (SeaweedFS), shared by two "hosts" (two state dirs)."""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import subprocess
import time
import uuid

import pytest

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import write_bytes as _write, read_bytes as _read
from tests.fuse_util import Mount, s3_env, wait_for


@pytest.fixture
def s3_mounts(s3_server, tmp_path):
    """Two workspaces (hosts) on one S3 repository; host A mounted, B not yet."""
    url = f"s3://{s3_server.bucket}/fuse-{uuid.uuid4().hex[:10]}"
    env = s3_env(s3_server)
    a = Mount(str(tmp_path / "a"), store=url, env=env).init()
    b = Mount(str(tmp_path / "b"), store=url, env=env)
    a.mount()
    try:
        yield a, b
    finally:
        a.cleanup()
        b.cleanup()


def _cached_objects(m: Mount) -> set[str]:
    out = set()
    for d, _dirs, files in os.walk(os.path.join(m.state_dir, "repos")):
        if os.sep + "cache" + os.sep + "objects" in d + os.sep:
            out.update(files)
    return out


def test_s3_write_commit_read_and_share(s3_mounts, tmp_path):
    a, b = s3_mounts
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    for i in range(20):
        (src / "d" / f"f{i}").write_bytes(os.urandom(i * 1000))
    (src / "d" / "e" / "x.txt").write_text("hello s3\n")
    subprocess.run(["cp", "-r", str(src), a.branch_path("tree")], check=True)
    big = os.urandom(24 << 20)
    _write(a.branch_path("big.bin"), big)
    os.mkdir(a.branch_path("empty"))
    assert _read(a.branch_path("tree/d/e/x.txt")) == b"hello s3\n"
    cid = a.commit(message="on s3")
    assert sorted(os.listdir(a.path("commits", cid))) == ["big.bin", "empty", "tree"]
    assert _read(a.path("commits", cid[:8], "tree/d/f7")) == (src / "d" / "f7").read_bytes()

    # host B: a fresh workspace mounts the same store
    b.mount()
    assert sorted(os.listdir(b.branch_path())) == ["big.bin", "empty", "tree"]
    # the first bytes of a large object come before (and without) the whole object
    digest = hashlib.sha256(big).hexdigest()
    with open(b.path("commits", cid, "big.bin"), "rb") as f:
        assert f.read(1000) == big[:1000]
        assert digest not in _cached_objects(b)
        f.seek(20 << 20)
        assert f.read(4096) == big[20 << 20:(20 << 20) + 4096]
    assert hashlib.sha256(_read(b.branch_path("big.bin"))).hexdigest() == digest
    # B writes and commits; A's mount follows the moved head
    _write(b.branch_path("from-b.txt"), b"written on host B")
    b.cli("commit", "main", "-m", "from b")
    wait_for(lambda: os.path.exists(a.branch_path("from-b.txt")), timeout=10)
    assert _read(a.branch_path("from-b.txt")) == b"written on host B"
    a.assert_clean_log()
    b.assert_clean_log()


def test_s3_damaged_object_read_by_ranges_fails_with_eio(s3_mounts, s3_server):
    """A big object streamed from S3 by ranges is hashed as the ranges arrive: a whole-file
    read of an object damaged in the bucket fails before it ends."""
    a, b = s3_mounts
    data = os.urandom(9 * 1024 * 1024 + 5)
    _write(a.branch_path("victim"), data)
    cid = a.commit()
    digest = hashlib.sha256(data).hexdigest()
    prefix = a.store.split("/", 3)[3]
    damaged = bytearray(data)
    damaged[-10] ^= 0xFF
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=f"{prefix}/data/{digest[:2]}/{digest}",
                                  Body=bytes(damaged))
    b.mount()  # a fresh workspace: nothing cached, reads go to the bucket
    with open(b.path("commits", cid, "victim"), "rb") as f:
        assert f.read(1000) == data[:1000]  # served before the whole object is seen
    with pytest.raises(OSError) as exc:
        _read(b.path("commits", cid, "victim"))
    assert exc.value.errno == errno.EIO
    assert "does not match its hash" in b.log_text()


def test_s3_ranged_reads_are_checked_by_the_sums_of_an_earlier_verification(s3_mounts, s3_server):
    """Once a whole ranged read has verified a big object, a later daemon checks each fetched
    range against its chunk sums: a range damaged since fails before it is served."""
    import glob

    a, b = s3_mounts
    mib = 1 << 20
    data = os.urandom(20 * mib + 3)
    _write(a.branch_path("big"), data)
    cid = a.commit()
    b.mount()
    assert _read(b.path("commits", cid, "big")) == data  # streamed by ranges, hashed in order
    digest = hashlib.sha256(data).hexdigest()
    assert glob.glob(os.path.join(b.state_dir, "**", "sums", "data", digest[:2], digest), recursive=True)
    assert digest not in _cached_objects(b)
    damaged = bytearray(data)
    damaged[17 * mib + 9] ^= 0xFF
    prefix = a.store.split("/", 3)[3]
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=f"{prefix}/data/{digest[:2]}/{digest}",
                                  Body=bytes(damaged))
    b.umount()
    b.remount()
    with open(b.path("commits", cid, "big"), "rb") as f:
        assert f.read(mib) == data[:mib]
        f.seek(17 * mib)
        with pytest.raises(OSError) as exc:
            f.read(4096)
        assert exc.value.errno == errno.EIO
    assert "chunk 17 does not match its sum" in b.log_text()


def test_s3_rename_and_kill9(s3_mounts):
    a, _ = s3_mounts
    os.makedirs(a.branch_path("job/_temporary/0"))
    for i in range(10):
        _write(a.branch_path(f"job/_temporary/0/part-{i}"), str(i).encode() * 1000)
    os.rename(a.branch_path("job/_temporary/0"), a.branch_path("job/out"))
    f = open(a.branch_path("job/synced"), "wb")
    f.write(b"fsync on s3")
    f.flush()
    os.fsync(f.fileno())
    a.kill9()
    try:
        f.close()
    except OSError:
        pass
    a.remount()
    assert sorted(os.listdir(a.branch_path("job/out"))) == [f"part-{i}" for i in range(10)]
    assert _read(a.branch_path("job/synced")) == b"fsync on s3"
    cid = a.commit()
    assert _read(a.path("commits", cid, "job/out/part-3")) == b"3" * 1000


def test_s3_outage_gives_eio_and_the_mount_survives(s3_server, tmp_path):
    url = f"s3://{s3_server.bucket}/fuse-{uuid.uuid4().hex[:10]}"
    env = dict(s3_env(s3_server), GRAVFS_S3_MAX_ATTEMPTS="1")
    a = Mount(str(tmp_path / "a"), store=url, env=env).init()
    b = Mount(str(tmp_path / "b"), store=url, env=env)
    try:
        a.mount()
        os.makedirs(a.branch_path("d"))
        _write(a.branch_path("d/f"), b"survives")
        cid = a.commit()
        a.umount()
        b.mount()  # nothing of the data is cached in this workspace
        s3_server.stop()
        try:
            with pytest.raises(OSError) as exc:
                _read(b.path("commits", cid, "d", "f"))
            assert exc.value.errno == errno.EIO
            assert sorted(os.listdir(b.mnt)) == ["branches", "commits", "tags"]
        finally:
            s3_server.start()
        assert _read(b.path("commits", cid, "d", "f")) == b"survives"
        assert _read(b.branch_path("d/f")) == b"survives"
        assert "Traceback" not in b.log_text()
    finally:
        if s3_server.proc is None or s3_server.proc.poll() is not None:
            s3_server.start()
        a.cleanup()
        b.cleanup()


def test_an_s3_outage_leaves_the_branch_as_last_read_and_written_files_readable(s3_server,
                                                                               tmp_path):
    """While the store cannot be reached, the branch is what it was when the store last
    answered: listed, read where its data is local (what this mount wrote and uploaded
    stays in the tier) and written (the new file is staged, and committed once the
    store is back)."""
    url = f"s3://{s3_server.bucket}/fuse-{uuid.uuid4().hex[:10]}"
    env = dict(s3_env(s3_server), GRAVFS_S3_MAX_ATTEMPTS="1")
    a = Mount(str(tmp_path / "a"), store=url, env=env).init()
    try:
        a.mount(options=["head_ttl=0.2"])
        os.makedirs(a.branch_path("d"))
        _write(a.branch_path("d/old"), b"committed")
        a.commit()
        _write(a.branch_path("d/new"), b"staged and uploaded")
        pending = os.path.join(a.state_dir, "repos", "*", "pending", "*", "*")
        wait_for(lambda: not glob.glob(pending), timeout=30)
        s3_server.stop()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:  # reads reach the daemon
                f.write("1")
            time.sleep(0.3)  # past the head cache's 0.2 s
            assert sorted(os.listdir(a.branch_path("d"))) == ["new", "old"]
            assert _read(a.branch_path("d/old")) == b"committed"
            assert _read(a.branch_path("d/new")) == b"staged and uploaded"
            _write(a.branch_path("d/during"), b"written in the outage")
            assert sorted(os.listdir(a.branch_path("d"))) == ["during", "new", "old"]
            assert "branches are read at the heads read last" in a.log_text()
        finally:
            s3_server.start()
        cid = a.commit()
        assert _read(a.path("commits", cid, "d", "during")) == b"written in the outage"
        assert "Traceback" not in a.log_text()
    finally:
        if s3_server.proc is None or s3_server.proc.poll() is not None:
            s3_server.start()
        a.cleanup()
