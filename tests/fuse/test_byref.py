"""By-reference entries through a real mount: read from their source (file:// and s3:// in a
bucket of the test SeaweedFS) exactly while unchanged, EIO once the source changed or
vanished; a write makes the file an ordinary (content-addressed) one, a rename keeps the
reference."""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid

import pytest

from tests.byref_util import (SOURCE_BUCKET, byref_entry, commit_byref, ensure_source_bucket,
                              file_source, put_source, write_file)
from tests.fuse_util import Mount, fuse_available, read_bytes, s3_env

MiB = 1 << 20


@pytest.fixture
def mount_env(s3_server, tmp_path):
    """A local-store repository whose daemon reaches the test server (for s3:// sources)."""
    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: these tests need real FUSE mounts")
    m = Mount(str(tmp_path / "repo"), env=s3_env(s3_server)).init()
    try:
        yield m, ensure_source_bucket(s3_server)
    finally:
        m.cleanup()


def _errno_of_read(path: str) -> int:
    try:
        read_bytes(path)
    except OSError as e:
        return e.errno
    raise AssertionError(f"{path} read without an error")


def _ls_json(m: Mount, target: str) -> dict:
    rows = [json.loads(line) for line in m.cli("ls", "--json", target).stdout.splitlines()]
    assert len(rows) == 1, rows
    return rows[0]


def test_mount_serves_unchanged_sources_exactly(mount_env, tmp_path):
    m, client = mount_env
    small, big = os.urandom(70_000), os.urandom(9 * MiB + 13)  # big: several reader chunks
    for name, data in (("small", small), ("big", big)):
        write_file(str(tmp_path / name), data)
    key = f"lake/{uuid.uuid4().hex}/obj"
    files = {"ext/small": file_source(str(tmp_path / "small")),
             "ext/big": file_source(str(tmp_path / "big")),
             "ext/s3big": put_source(client, key + "-big", big),
             "ext/s3small": put_source(client, key + "-small", small)}
    commit_byref(m.store, m.state_dir, files)
    m.mount()
    head = m.head()
    expect = {"ext/small": small, "ext/big": big, "ext/s3big": big, "ext/s3small": small}
    for path, data in expect.items():
        for p in (m.branch_path(path), m.path("commits", head, path)):
            assert read_bytes(p) == data, p
            st = os.stat(p)
            assert st.st_size == len(data)
            assert st.st_mtime_ns == byref_entry(files[path]).mtime_ns  # the entry's, not the source's
    with open(m.branch_path("ext/big"), "rb") as f:  # a ranged read in the middle
        f.seek(5 * MiB - 3)
        assert f.read(10) == big[5 * MiB - 3:5 * MiB + 7]
    assert sorted(os.listdir(m.branch_path("ext"))) == ["big", "s3big", "s3small", "small"]
    m.assert_clean_log()


def test_changed_or_vanished_sources_give_eio(mount_env, tmp_path):
    m, client = mount_env
    data = os.urandom(300_000)
    paths = {n: str(tmp_path / n) for n in ("kept", "longer", "rewritten", "gone")}
    for p in paths.values():
        write_file(p, data)
    key = f"lake/{uuid.uuid4().hex}"
    files = {f"f/{n}": file_source(p) for n, p in paths.items()}
    files.update({"s/kept": put_source(client, f"{key}/kept", data),
                  "s/etag": put_source(client, f"{key}/etag", data),
                  "s/gone": put_source(client, f"{key}/gone", data)})
    commit_byref(m.store, m.state_dir, files)
    write_file(paths["longer"], data + b"!")
    st = os.stat(paths["rewritten"])
    write_file(paths["rewritten"], bytes(reversed(data)))  # same size, newer mtime
    os.utime(paths["rewritten"], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
    os.unlink(paths["gone"])
    put_source(client, f"{key}/etag", bytes(reversed(data)))  # same size, another ETag
    client.delete_object(Bucket=SOURCE_BUCKET, Key=f"{key}/gone")
    m.mount()
    for name in ("f/longer", "f/rewritten", "f/gone", "s/etag", "s/gone"):
        assert os.stat(m.branch_path(name)).st_size == len(data)  # stat needs no source
        assert _errno_of_read(m.branch_path(name)) == errno.EIO, name
        assert _errno_of_read(m.path("commits", m.head(), name)) == errno.EIO, name
    assert read_bytes(m.branch_path("f/kept")) == data  # the mount goes on serving others
    assert read_bytes(m.branch_path("s/kept")) == data
    log = m.log_text()
    assert f"source file://{paths['gone']} of a by-reference entry no longer exists" in log
    assert "Traceback" not in log


def test_write_makes_an_ordinary_file_and_rename_keeps_the_reference(mount_env, tmp_path):
    m, client = mount_env
    data = os.urandom(5 * MiB + 1)
    src_path = str(tmp_path / "src")
    write_file(src_path, data)
    s3 = put_source(client, f"lake/{uuid.uuid4().hex}", data)
    commit_byref(m.store, m.state_dir, {"a": file_source(src_path), "b": file_source(src_path),
                                        "s": s3})
    m.mount()
    with open(m.branch_path("a"), "r+b") as f:  # copy-on-write from the source
        f.seek(100)
        f.write(b"CHANGED")
    with open(m.branch_path("s"), "ab") as f:
        f.write(b"tail")
    os.rename(m.branch_path("b"), m.branch_path("moved"))
    os.chmod(m.branch_path("moved"), 0o600)  # metadata only: still the reference
    expect_a = data[:100] + b"CHANGED" + data[107:]
    assert read_bytes(m.branch_path("a")) == expect_a
    assert read_bytes(m.branch_path("s")) == data + b"tail"
    assert read_bytes(src_path) == data  # the source is never written
    for path in ("a", "s"):
        row = _ls_json(m, f"main:{path}")
        assert "by_reference" not in row and row["address"].startswith("data/")
    shutil.copyfile(m.branch_path("moved"), m.branch_path("copy"))  # cp: a file of its own
    copy = _ls_json(m, "main:copy")
    assert "by_reference" not in copy and copy["address"].startswith("data/")
    moved = _ls_json(m, "main:moved")
    assert moved["by_reference"] is True and moved["address"] == f"file://{src_path}"
    assert moved["mode"] & 0o7777 == 0o600
    m.commit("main", "edits")
    os.unlink(src_path)  # the written files are copies now; the renamed one is not
    assert read_bytes(m.branch_path("a")) == expect_a
    assert read_bytes(m.path("commits", m.head(), "s")) == data + b"tail"
    assert _errno_of_read(m.branch_path("moved")) == errno.EIO
    assert read_bytes(m.branch_path("copy")) == data


def test_writing_over_a_changed_source_fails_but_truncating_it_does_not(mount_env, tmp_path):
    m, _client = mount_env
    src_path = str(tmp_path / "src")
    write_file(src_path, b"old content")
    commit_byref(m.store, m.state_dir, {"a": file_source(src_path), "b": file_source(src_path)})
    write_file(src_path, b"new content that is longer")
    m.mount()
    with pytest.raises(OSError) as info:  # the old bytes are needed and cannot be had
        with open(m.branch_path("a"), "r+b") as f:
            f.write(b"X")
    assert info.value.errno == errno.EIO
    with open(m.branch_path("b"), "wb") as f:  # O_TRUNC: nothing of the source is needed
        f.write(b"replaced")
    assert read_bytes(m.branch_path("b")) == b"replaced"
    assert "by_reference" not in _ls_json(m, "main:b")
    assert _errno_of_read(m.branch_path("a")) == errno.EIO  # still the reference
