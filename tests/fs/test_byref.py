"""By-reference entries in the repository API, `gravfs cat`/`ls` and fsck: read from their
source (file:// and s3:// on the test SeaweedFS), a changed or vanished source is an
error (one line from the CLI, its own fsck finding), never other bytes."""

from __future__ import annotations

import io
import json
import os
import uuid

import pytest

from gravfs.errors import SourceChangedError
from gravfs.fs.entry import ADDRESS_FULL
from gravfs.fs.fsck import fsck
from gravfs.fs.repository import Repository
from tests.byref_util import (SOURCE_BUCKET, byref_entry, commit_byref, ensure_source_bucket,
                              file_source, put_source, write_file)
from tests.fuse_util import Mount

MiB = 1 << 20


@pytest.fixture
def local(tmp_path):
    m = Mount(str(tmp_path)).init()
    return m


def _open(m: Mount) -> Repository:
    return Repository.open(m.store, m.state_dir)


def change_file(path: str, how: str) -> None:
    """Change a file source the ways the contract must notice."""
    st = os.stat(path)
    data = open(path, "rb").read()
    if how == "other size":
        write_file(path, data + b"more")
    elif how == "same size other bytes":
        write_file(path, bytes(b ^ 0x5A for b in data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))  # a newer mtime
    elif how == "vanished":
        os.unlink(path)
    else:
        raise AssertionError(how)


def test_file_source_reads_exactly_and_shows_the_entry_metadata(local, tmp_path):
    data = os.urandom(10 * MiB + 11)  # more than one checked chunk
    path = str(tmp_path / "lake" / "part-0.bin")
    os.makedirs(os.path.dirname(path))
    write_file(path, data)
    commit_byref(local.store, local.state_dir, {"ext/part-0.bin": file_source(path)})
    repo = _open(local)
    try:
        node = repo.stat("main", "ext/part-0.bin")
        assert node.entry.address_type == ADDRESS_FULL
        assert node.entry.size == len(data) and node.entry.mtime_ns == byref_entry(
            file_source(path)).mtime_ns  # from the entry, not from the source
        assert repo.read("main", "ext/part-0.bin") == data
        assert repo.read(node, offset=9 * MiB, length=3 * MiB) == data[9 * MiB:]
        out = io.BytesIO()
        assert repo.copy_out(node, out) == len(data) and out.getvalue() == data
        assert [n.entry.size for n in repo.list_dir("main", "ext")] == [len(data)]
    finally:
        repo.close()
    cat = _cat_bytes(local, "main:ext/part-0.bin")
    assert cat.returncode == 0 and cat.stdout == data
    res = local.cli("ls", "--json", "main:ext")
    row = json.loads(res.stdout.splitlines()[0])
    assert row["by_reference"] is True and row["address"] == f"file://{path}"
    assert row["size"] == len(data)


def _cat_bytes(m: Mount, target: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", m.store, "--state-dir",
                           m.state_dir, "cat", target], capture_output=True, env=m.env)


@pytest.mark.parametrize("how", ["other size", "same size other bytes", "vanished"])
def test_changed_file_source_is_an_error_never_other_bytes(local, tmp_path, how):
    data = os.urandom(200_000)
    path = str(tmp_path / "src.bin")
    write_file(path, data)
    commit_byref(local.store, local.state_dir, {"ext/a.bin": file_source(path)})
    ok = _cat_bytes(local, "main:ext/a.bin")
    assert ok.returncode == 0 and ok.stdout == data
    change_file(path, how)
    repo = _open(local)
    try:
        with pytest.raises(SourceChangedError) as info:
            repo.read("main", "ext/a.bin")
        assert info.value.vanished == (how == "vanished")
        out = io.BytesIO()
        with pytest.raises(SourceChangedError):
            repo.copy_out(repo.stat("main", "ext/a.bin"), out)
        assert out.getvalue() == b""
    finally:
        repo.close()
    res = _cat_bytes(local, "main:ext/a.bin")
    assert res.returncode == 7 and res.stdout == b""
    err = res.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("gravfs: source file://") and "Traceback" not in err
    assert ("no longer exists" if how == "vanished" else "changed") in err


def test_rename_and_branch_keep_the_reference(local, tmp_path):
    path = str(tmp_path / "src.bin")
    write_file(path, b"referenced bytes")
    commit_byref(local.store, local.state_dir, {"ext/a.bin": file_source(path)})
    repo = _open(local)
    try:
        before = repo.stat("main", "ext/a.bin").entry
        repo.rename("main", "ext/a.bin", "moved/b.bin")
        repo.commit("main", "move")
        after = repo.stat("main", "moved/b.bin").entry
        assert after == before  # the same entry: still the source, nothing copied
        repo.create_branch("dev", "main")
        assert repo.read("dev", "moved/b.bin") == b"referenced bytes"
    finally:
        repo.close()


def test_fsck_checks_sources_as_their_own_finding(local, tmp_path):
    kept, changed, gone = (str(tmp_path / n) for n in ("kept", "changed", "gone"))
    for p in (kept, changed, gone):
        write_file(p, os.urandom(5000))
    empty = str(tmp_path / "empty")
    write_file(empty, b"")
    commit_byref(local.store, local.state_dir, {
        "k": file_source(kept), "c": file_source(changed), "g": file_source(gone),
        "e": file_source(empty), "k-again": file_source(kept)})
    repo = _open(local)
    try:
        rep = fsck(repo, progress=False)
        assert rep.exit_code == 0 and not rep.problems and not rep.sources
        assert rep.source_objects == 4 and rep.data_objects == 0  # none looked for under data/
        change_file(changed, "other size")
        change_file(gone, "vanished")
        rep = fsck(repo, check_data=True, progress=False)
        assert not rep.problems  # the store itself is sound
        assert sorted(rep.sources) == sorted([
            f"source file://{changed}: " + _msg(repo, "c"),
            f"source file://{gone}: " + _msg(repo, "g")])
        assert rep.exit_code == 1 and "2 by-reference source(s) changed or missing" in rep.summary()
    finally:
        repo.close()
    res = local.cli("fsck", "-q", check=False)
    assert res.returncode == 1
    assert sum(1 for line in res.stdout.splitlines() if line.startswith("source ")) == 2


def _msg(repo: Repository, path: str) -> str:
    try:
        repo.read("main", path)
    except SourceChangedError as exc:
        return str(exc)
    raise AssertionError(f"{path} still reads")


def test_unsupported_address_is_one_line(local):
    from gravfs.data.external import Source
    commit_byref(local.store, local.state_dir, {"x": Source("http://example.com/x", 3, "t")})
    res = local.cli("cat", "main:x", check=False)
    assert res.returncode == 7 and res.stderr.count("\n") == 1
    assert "only s3:// and file:// sources" in res.stderr


# -- s3:// sources ---------------------------------------------------------------------


@pytest.mark.parametrize("store_on_s3", [False, True])
def test_s3_source_reads_and_a_changed_one_fails(s3_server, tmp_path, store_on_s3, monkeypatch):
    """Sources in another bucket of the same server: with the store's S3 settings, or
    (a local store) the environment's."""
    from tests.fuse_util import s3_env
    client = ensure_source_bucket(s3_server)
    if store_on_s3:
        m = Mount(str(tmp_path), store=f"s3://{s3_server.bucket}/byref-{uuid.uuid4().hex[:10]}",
                  env=s3_env(s3_server)).init()
    else:
        m = Mount(str(tmp_path), env=s3_env(s3_server)).init()
    base = f"lake/{uuid.uuid4().hex}"
    data = os.urandom(9 * MiB + 1)
    files = {"same": put_source(client, f"{base}/same", data),
             "etag": put_source(client, f"{base}/etag", data[:1000]),
             "size": put_source(client, f"{base}/size", data[:1000]),
             "gone": put_source(client, f"{base}/gone", data[:1000])}
    for k, v in s3_env(s3_server).items():
        monkeypatch.setenv(k, v)  # this process's Repository (Mount's env is the CLI's)
    commit_byref(m.store, m.state_dir, {f"ext/{k}": v for k, v in files.items()})
    assert _cat_bytes(m, "main:ext/same").stdout == data
    put_source(client, f"{base}/etag", bytes(1000))  # same size, another ETag
    put_source(client, f"{base}/size", data[:999])
    client.delete_object(Bucket=SOURCE_BUCKET, Key=f"{base}/gone")
    for name, needle in (("etag", "changed"), ("size", "changed"), ("gone", "no longer exists")):
        res = _cat_bytes(m, f"main:ext/{name}")
        err = res.stderr.decode()
        assert res.returncode == 7 and res.stdout == b"" and err.count("\n") == 1, err
        assert needle in err and f"s3://{SOURCE_BUCKET}/{base}/{name}" in err
    res = m.cli("fsck", "-q", check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    found = [line for line in res.stdout.splitlines() if line.startswith("source ")]
    assert len(found) == 3 and not any("/same:" in line for line in found)
