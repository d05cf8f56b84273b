"""gravfs spark export: a commit's files copied to a directory or an S3 prefix, verified,
resumable, and incremental (--since) reading only the ranges that differ."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gravfs.fs.entry import KIND_FIFO, EntryInfo
from gravfs.fs.importer import import_tree as local_import
from gravfs.fs.paths import escape_key
from gravfs.fs.repository import Repository
from gravfs.spark import check_export, run_export
from gravfs.spark.export import _known_sha
from gravfs.spark.treediff import plan
from tests.fuse_util import s3_env
from tests.repo_util import small_settings
from tests.spark.test_import import make_tree
from tests.spark.killable import HANG, KillableCli
from tests.spark.test_runtime import SPARK_CONF, run_cli

pytestmark = pytest.mark.spark


def tree_of_dir(root: str) -> dict:
    """path -> (kind, content or target, mode, mtime_ns) of everything under root but the
    export's own files; directories only when empty."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == "_gravfs_export" or rel.startswith("_gravfs_export/"):
            continue
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            r = os.path.normpath(os.path.join(rel, name))
            if r == "_SUCCESS":
                continue
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[r] = ("symlink", os.readlink(p), None, st.st_mtime_ns)
            else:
                with open(p, "rb") as f:
                    out[r] = ("file", f.read(), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
        if not files and not dirs and rel != ".":
            out[rel + "/"] = ("dir", None, None, None)
    return out


def tree_of_ref(repo, ref: str, files_only: bool = False) -> dict:
    """What an export of ref must hold, from the repository itself."""
    out = {}
    keys = [n for n in repo.walk(ref)]
    for n in keys:
        e = n.entry
        if n.kind not in ("file", "dir", "symlink"):
            continue  # special files: see test_exportdest
        if n.kind == "dir":
            prefix = n.key
            if files_only or any(m.key != prefix and m.key.startswith(prefix) for m in keys):
                continue
            out[os.fsdecode(escape_key(n.key))] = ("dir", None, None, None)
        elif n.kind == "symlink":
            if not files_only:
                out[os.fsdecode(escape_key(n.key, False))] = ("symlink", e.symlink_target, None,
                                                              e.mtime_ns)
        else:
            out[os.fsdecode(escape_key(n.key, False))] = ("file", repo.read(n), e.mode & 0o7777,
                                                          e.mtime_ns)
    return out


def report_rows(root: str, name: str = None) -> list[dict]:
    base = os.path.join(root, "_gravfs_export")
    dirs = [d for d in os.listdir(base) if d.startswith("report-")]
    if name:
        dirs = [name]
    rows = []
    for d in dirs:
        for f in os.listdir(os.path.join(base, d)):
            rows += pq.read_table(os.path.join(base, d, f)).to_pylist()
    return rows


@pytest.fixture
def env(tmp_path):
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    repo = Repository.init(store, state, settings=small_settings())
    src = str(tmp_path / "src")
    os.makedirs(src)
    make_tree(src, dirs=5, files=24)
    with open(os.path.join(src, "holes.bin"), "wb") as f:  # a sparse file (a manifest)
        f.write(b"head")
        f.seek(20 << 20)
        f.write(b"tail")
    local_import(repo, src, "main", progress=False)
    yield repo, store, state
    repo.close()


def _change(repo, branch: str = "main", seed: int = 5) -> None:
    rnd = random.Random(seed)
    files = [n for n in repo.walk(branch) if n.kind == "file" and b"/" in n.key]
    changed, removed = rnd.sample(files, 6), rnd.sample(files, 5)
    for n in changed:
        repo.write_file(branch, n.key, rnd.randbytes(77), mode=0o640)
    for n in removed:
        try:
            repo.remove(branch, n.key)
        except Exception:
            pass
    repo.remove(branch, "part=004", recursive=True)  # a whole directory goes
    repo.remove(branch, "empty-top")                  # an empty directory goes
    # only its mode and mtime change: the copy there is fixed, not copied again
    same = next(n for n in files if n not in changed + removed
                and not n.key.startswith(b"part=004"))
    repo.write_file(branch, same.key, repo.read(same), mode=0o604, mtime_ns=123)
    repo.write_file(branch, "added/deep/x.bin", b"new")
    repo.symlink(branch, "added/link", "deep/x.bin")
    repo.commit(branch, "changes")


def test_full_export_to_directory(spark, env, tmp_path):
    repo, store, state = env
    # keys another writer made: exported under the names gravfs ls shows
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    addr, n = repo.data.put_bytes(b"foreign")
    e = EntryInfo(address=addr, size=n, mtime_ns=5, mode=0o100644, kind=KIND_FILE)
    repo.stage("main", [(b"odd//name", e), (b"x/../y", e), (b"nonutf8-\xff", e)])
    repo.commit("main", "foreign names")
    dest = str(tmp_path / "out")
    res = run_export(spark, repo, check_export(repo, "main", dest))
    assert tree_of_dir(dest) == tree_of_ref(repo, "main")
    assert res["copied"] == res["entries"] and res["present"] == 0
    success = json.loads(open(os.path.join(dest, "_SUCCESS")).read())
    assert success["commit"] == repo.head("main", fresh=True)
    rows = report_rows(dest)
    assert len(rows) == res["entries"]
    by_path = {r["path"]: r for r in rows}
    holes = by_path["holes.bin"]
    assert holes["action"] == "copied" and holes["size"] == (20 << 20) + 4
    st = os.stat(os.path.join(dest, "holes.bin"))
    assert st.st_blocks * 512 < 4 << 20  # the hole stayed a hole
    # a second run: already there, nothing read
    job = check_export(repo, "main", dest)
    assert job.done


def test_incremental_export(spark, env, tmp_path):
    repo, store, state = env
    dest = str(tmp_path / "out")
    first = repo.head("main", fresh=True)
    run_export(spark, repo, check_export(repo, "main", dest))
    _change(repo)
    job = check_export(repo, "main", dest, since=first)
    res = run_export(spark, repo, job)
    assert tree_of_dir(dest) == tree_of_ref(repo, "main")
    assert not os.path.exists(os.path.join(dest, "part=004"))  # its directories went too
    p = plan(repo, first, "main")
    assert res["ranges_read"] == p.ranges_read < p.ranges_left + p.ranges_right
    kinds = [d.kind for d in repo.diff(first, "main")]
    assert res["deleted"] == kinds.count("removed") > 24
    assert res["copied"] + res["present"] == len(kinds) - kinds.count("removed")
    assert res["present"] == 1 and res["copied"] >= 3  # a mode change is no copy
    assert json.loads(open(os.path.join(dest, "_SUCCESS")).read())["since"] == first


def test_a_name_both_a_file_and_a_directory_exports_the_directory(spark, env, tmp_path):
    """Keys "README" and "README/inside" (an object store may hold both), and a symlink
    "lnk" to a directory outside DEST beside keys under "lnk/": DEST holds the
    directories (as the mount shows them), the file and the symlink are skipped with a
    reason, and nothing is written outside DEST; in an incremental export (where
    DEST already has the file and the symlink from the first one) and in a full one."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.spark.export import SHADOWED

    repo, store, state = env
    outside = tmp_path / "outside"
    outside.mkdir()
    repo.symlink("main", "lnk", str(outside))
    first = repo.commit("main", "a link out").id
    dest = str(tmp_path / "out")
    run_export(spark, repo, check_export(repo, "main", dest))
    assert os.readlink(os.path.join(dest, "lnk")) == str(outside)
    addr, n = repo.data.put_bytes(b"inside")
    e = EntryInfo(address=addr, size=n, mtime_ns=5, mode=0o100644, kind=KIND_FILE)
    repo.stage("main", [(b"README/inside", e), (b"lnk/in", e), (b"lnk/deep/er", e)])
    repo.commit("main", "keys under a file and under a symlink")
    want = {k: v for k, v in tree_of_ref(repo, "main").items() if k not in ("README", "lnk")}
    for where, since in ((dest, first), (str(tmp_path / "full"), None)):
        res = run_export(spark, repo, check_export(repo, "main", where, since=since))
        assert list(outside.iterdir()) == []
        assert tree_of_dir(where) == want
        assert open(os.path.join(where, "lnk", "deep", "er"), "rb").read() == b"inside"
        skipped = {r["path"]: r["reason"] for r in report_rows(where) if r["action"] == "skipped"}
        if since is None:  # (incrementally, README is no change: not in the report)
            assert skipped == {"README": SHADOWED, "lnk": SHADOWED}
            assert res["skipped"] == 2


def _dest_s3(server, tmp_path) -> str:
    return f"s3://{server.bucket}/export-{tmp_path.name}"


def _objects(server, url: str) -> dict[str, bytes]:
    env = s3_env(server)
    c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    prefix = url.split("/", 3)[3] + "/"
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=server.bucket,
                                                            Prefix=prefix):
        for o in page.get("Contents", ()):
            rel = o["Key"][len(prefix):]
            if rel == "_SUCCESS" or rel.startswith("_gravfs_export/"):
                continue
            out[rel] = c.get_object(Bucket=server.bucket, Key=o["Key"])["Body"].read()
    return out


@pytest.fixture
def s3(s3_server):
    return s3_server.ensure_running()


def export_cli(store: str, state: str, *args, **env) -> dict:
    rc, out, err = run_cli("spark", "export", *args, "--master", "local[2]", "--json",
                           *SPARK_CONF, store=store, state=state, **env)
    return json.loads(out)


def test_export_to_s3_full_then_incremental(env, tmp_path, s3):
    """Executors write to S3 with the store's S3 settings (the AWS environment); the
    20 MiB file is a multipart upload; symlinks and empty directories are skipped."""
    repo, store, state = env
    cli_state = str(tmp_path / "cli-state")
    dest = _dest_s3(s3, tmp_path)
    first = repo.head("main", fresh=True)
    res = export_cli(store, cli_state, "main", dest, **s3_env(s3))
    want = {p: v[1] for p, v in tree_of_ref(repo, "main", files_only=True).items()}
    assert _objects(s3, dest) == want
    assert res["skipped"] == 5 * 2 + 1 and res["copied"] == len(want)
    _change(repo)
    res = export_cli(store, cli_state, "main", dest, "--since", first, **s3_env(s3))
    want = {p: v[1] for p, v in tree_of_ref(repo, "main", files_only=True).items()}
    assert _objects(s3, dest) == want
    assert res["since"] == first and res["deleted"] > 24
    # again: DEST already holds it
    res = export_cli(store, cli_state, "main", dest, "--since", first, **s3_env(s3))
    assert res["commit"] == repo.head("main", fresh=True)


def test_cli_bad_input(env, tmp_path):
    repo, store, state = env
    def fails(*args):
        rc, out, err = run_cli("spark", "export", *args, store=store, state=state, check=False)
        assert rc != 0 and err.strip().count("\n") == 0 and "Traceback" not in err, err
        return err
    assert "nosuch" in fails("nosuch", str(tmp_path / "o"))
    blocker = tmp_path / "file"
    blocker.write_bytes(b"x")
    assert "cannot write" in fails("main", str(blocker / "sub"))
    assert f"{blocker} is not a directory" in fails("main", str(blocker))  # said "File exists"
    for empty in ("", "file://"):  # was the working directory
        assert "no destination given" in fails("main", empty)
    # into the repository's own directories: the store, gravfs's state directory
    for inside, what in ((tmp_path / "store" / "out", f"this repository's store ({store})"),
                         (tmp_path / "state" / "out", f"gravfs's state directory ({state})")):
        assert f"cannot export into {inside}: it is in {what}" in fails("main", str(inside))
        assert not inside.exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_bytes(b"1,2\n")
    assert "not empty" in fails("main", str(other))
    assert "no finished export" in fails("main", str(other), "--since", "main")
    assert sorted(os.listdir(other)) == ["data.csv"]  # refused: nothing written there


def _placed(root: str) -> dict[str, int]:
    """path -> inode of the exported files (not the export's own files)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        if "_gravfs_export" not in dirpath:
            for f in files:
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return out


def test_killed_export_resumes(env, tmp_path):
    """The driver (and its JVM and workers) killed mid-copy: no _SUCCESS; the same command
    again finishes, copying only what is missing: a file placed before the kill is verified
    and kept (same inode), never copied again."""
    repo, store, state = env
    cli_state = str(tmp_path / "cli-state")
    dest = str(tmp_path / "out")
    e = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=cli_state,
             # each worker process lets 15 data objects through, then hangs on the next
             GRAVFS_STORE_FAULT=f"op=download|get|get_range,key=data/*,after=15,{HANG}")
    with KillableCli(["spark", "export", "main", dest, "--master", "local[2]", *SPARK_CONF],
                     e, str(tmp_path / "export.err"), cli_state) as run:
        run.wait_for(lambda: len(_placed(dest)) >= 15, "15 files exported")
    assert not os.path.exists(os.path.join(dest, "_SUCCESS"))
    before = _placed(dest)
    res = export_cli(store, cli_state, "main", dest)
    assert tree_of_dir(dest) == tree_of_ref(repo, "main")
    after = _placed(dest)
    # a sparse or chunked file's hash is not known without reading it: such a file is copied
    # again rather than taken on trust (DirDest.present)
    unsure = {os.fsdecode(escape_key(n.key, False)) for n in repo.walk("main")
              if n.kind == "file" and _known_sha(n.entry) is None}
    kept = {p: i for p, i in before.items() if p not in unsure}
    assert kept and {p: after[p] for p in kept} == kept
    assert res["present"] + res["copied"] + res["skipped"] == res["entries"]
    # copied counts the first run's finished tasks too (their report parts are kept)
    assert res["present"] + res["copied"] >= len(before)
    assert not os.path.exists(os.path.join(dest, "_gravfs_export", "tmp"))
    rows = report_rows(dest)
    assert sorted(r["path"] for r in rows) == sorted(
        {r["path"] for r in rows})  # one row per entry, across both runs
    assert len(rows) == res["entries"]


def test_by_reference_entries_are_read_from_their_source(spark, tmp_path):
    """By-reference entries are copied from their source, checked against its size and
    e_tag: a source changed since it was referenced fails the export (one line, no
    _SUCCESS), never exports other bytes."""
    from tests.byref_util import commit_byref, file_source, write_file
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    srcdir = tmp_path / "sources"
    srcdir.mkdir()
    sources = {}
    for i in range(6):
        p = str(srcdir / f"s{i}.bin")
        write_file(p, bytes([i]) * (1000 + i))
        sources[f"ref/s{i}.bin"] = file_source(p)
    commit_byref(store, state, sources)
    with Repository.open(store, state) as repo:
        dest = str(tmp_path / "out")
        res = run_export(spark, repo, check_export(repo, "main", dest))
        assert res["copied"] == 6
        for i in range(6):
            with open(os.path.join(dest, f"ref/s{i}.bin"), "rb") as f:
                assert f.read() == bytes([i]) * (1000 + i)
        write_file(str(srcdir / "s3.bin"), b"changed behind gravfs's back")
        dest2 = str(tmp_path / "out2")
        job = check_export(repo, "main", dest2)
        with pytest.raises(Exception) as info:
            run_export(spark, repo, job)
        msg = str(info.value)
        assert "s3.bin" in msg and "changed" in msg and "\n" not in msg
        assert not os.path.exists(os.path.join(dest2, "_SUCCESS"))
        assert not os.path.exists(os.path.join(dest2, "ref", "s3.bin"))


def _writers_of(directory: str) -> set[int]:
    """PIDs of processes holding a file under ``directory`` open."""
    pids = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(directory + "/"):
                    pids.add(int(pid))
        except OSError:
            continue
    return pids


def test_killed_executor_is_retried(env, tmp_path):
    """An executor's Python worker killed while it writes a copy: Spark runs the task
    again (local[2,4] allows retries) and the export finishes in the same run, with the
    killed worker's temp file gone and every file verified."""
    repo, store, state = env
    rnd = random.Random(9)
    for i in range(4):
        repo.write_file("main", f"big/b{i}.bin", rnd.randbytes(24 << 20))
    repo.commit("main", "big files")
    dest = str(tmp_path / "out")
    tmp = os.path.join(dest, "_gravfs_export", "tmp")
    e = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=str(tmp_path / "cli-state"))
    proc = subprocess.Popen([sys.executable, "-m", "gravfs.cli", "spark", "export", "main", dest,
                             "--master", "local[2,4]", "--json", *SPARK_CONF], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    killed = None
    try:
        deadline = time.monotonic() + 240
        while killed is None:
            assert proc.poll() is None, "the export ended before a worker could be killed"
            assert time.monotonic() < deadline, "no worker was seen writing a copy"
            for pid in _writers_of(tmp) - {proc.pid}:
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
            time.sleep(0.05)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err.decode()[-2000:]
    res = json.loads(out)
    # what the killed attempt finished before it died is found present by the retry
    assert res["copied"] + res["present"] == res["entries"]
    assert tree_of_dir(dest) == tree_of_ref(repo, "main")
    assert not os.path.exists(tmp)


def test_report_part_killed_before_its_rename_leaves_nothing_in_the_report(tmp_path):
    """A task killed between writing a report part and renaming it into place (the CI
    failure of 04f8e0e: the leftover was read as a second part, so rows doubled): the
    temp file is in the export's temp directory, which the next run's prepare empties."""
    root = str(tmp_path / "out")
    child = textwrap.dedent(f"""
        import os, signal
        from gravfs.spark import exportdest
        d = exportdest.DirDest({root!r})
        d.prepare()
        exportdest.os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)
        d.put_bytes("_gravfs_export/report-x/part-1.parquet", b"rows")
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    report = os.path.join(root, "_gravfs_export", "report-x")
    assert os.listdir(report) == []
    tmp = os.path.join(root, "_gravfs_export", "tmp")
    assert len(os.listdir(tmp)) == 1  # the staged part, complete but never placed
    from gravfs.spark.exportdest import DirDest
    DirDest(root).prepare()
    assert os.listdir(tmp) == []


def test_s3_export_skips_keys_s3_cannot_hold(env, tmp_path, s3):
    """A name that is not UTF-8 or a key over S3's 1,024 bytes is skipped with its
    reason; before, one such file failed the whole export on every try. A FIFO is
    skipped too (it became an empty object)."""
    repo, store, state = env
    latin, deep = b"part=000/caf\xe9.csv", b"/".join([b"d" * 250] * 5) + b"/f"
    repo.write_file("main", latin, b"latin-1 name")
    repo.write_file("main", deep, b"deep")
    repo.stage("main", [(b"pipe", EntryInfo(address="", size=0, mtime_ns=1, kind=KIND_FIFO))])
    repo.commit("main", "names S3 cannot hold, and a FIFO")
    first = repo.head("main", fresh=True)
    dest, cli_state = _dest_s3(s3, tmp_path), str(tmp_path / "cli-state")
    res = export_cli(store, cli_state, "main", dest, **s3_env(s3))
    want = {p: v[1] for p, v in tree_of_ref(repo, "main", files_only=True).items()
            if p.encode("utf-8", "surrogateescape") not in (latin, deep, b"pipe")}
    assert _objects(s3, dest) == want
    assert res["copied"] == len(want) and res["skipped"] == 5 * 2 + 1 + 3
    reasons = {r["key"]: r["reason"] for r in _s3_report(s3, dest) if r["action"] == "skipped"}
    assert reasons[latin] == "the name is not UTF-8, which S3 keys must be"
    assert reasons[deep] == "the key would be longer than S3's 1024 bytes"
    assert reasons[b"pipe"] == "a fifo: S3 has none"
    # removing them: nothing to delete, and the incremental export goes through
    repo.remove("main", latin)
    repo.remove("main", deep)
    repo.commit("main", "gone")
    res = export_cli(store, cli_state, "main", dest, "--since", first, **s3_env(s3))
    assert res["deleted"] == 0 and res["skipped"] == 2
    assert _objects(s3, dest) == want


def _s3_report(server, url: str) -> list[dict]:
    """The rows of every report part of the export at ``url``."""
    env = s3_env(server)
    c = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    prefix = url.split("/", 3)[3] + "/_gravfs_export/"
    rows = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=server.bucket,
                                                            Prefix=prefix):
        for o in page.get("Contents", ()):
            if o["Key"].endswith(".parquet"):
                body = c.get_object(Bucket=server.bucket, Key=o["Key"])["Body"].read()
                rows += pq.read_table(pa.BufferReader(body)).to_pylist()
    return rows
