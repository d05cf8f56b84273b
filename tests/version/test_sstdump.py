"""`gravfs sst-dump` on lakeFS's and gravfs's files, and RocksDB's own sst_dump on ours."""

import base64
import glob
import json
import os
import shutil
import subprocess

import pytest

from gravfs.fs.entry import decode_entry
from gravfs.version.committed.messages import RangeData
from tests.repo_util import repo, run_cli, store_target  # noqa: F401  (fixtures)

SST_DUMP = shutil.which("sst_dump")


def dump(*args):
    rc, out, err = run_cli("sst-dump", *args, store="unused", state="unused")
    return out


def test_dump_lakefs_range(compat_dir):
    rows = [json.loads(l) for l in dump(os.path.join(compat_dir, "lakefs", "range.sst")).splitlines()]
    assert [r["key"] for r in rows] == ["a/b/c/no", "a/b/c/yes"]
    assert all(len(r["identity"]) == 64 for r in rows)
    e = decode_entry(base64.b64decode(rows[1]["data"]))
    assert e.address and e.size > 0


def test_dump_lakefs_metarange_and_properties(compat_dir):
    path = os.path.join(compat_dir, "lakefs", "metarange.sst")
    (row,) = [json.loads(l) for l in dump(path).splitlines()]
    assert row["key"] == "a/b/c/yes"
    assert bytes.fromhex(row["identity"]).decode() == \
        "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
    rd = RangeData.FromString(base64.b64decode(row["data"]))
    assert rd.max_key == b"a/b/c/yes" and rd.count >= 1
    props = json.loads(dump("--properties", "--json", path))
    assert props["type"] == "metaranges" and props["rocksdb.num_entries"] == 1
    ok1 = [json.loads(l) for l in dump(os.path.join(compat_dir, "lakefs", "ok1.sst")).splitlines()]
    assert len(ok1) == 105 and ok1[0]["key"] == "first" and ok1[-1]["key"] == "xyzzy"


def test_dump_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.sst"
    bad.write_bytes(b"not an sstable at all" * 10)
    rc, out, err = run_cli("sst-dump", str(bad), store="unused", state="unused", check=False)
    assert rc != 0 and str(bad) in err and len(err.strip().splitlines()) == 1


def _committed_files(repo, kind):
    root = repo.store.root if hasattr(repo.store, "root") else None
    return sorted(glob.glob(os.path.join(root, "_gravfs", kind, "*")))


@pytest.mark.skipif(SST_DUMP is None, reason="Debian's rocksdb-tools (sst_dump) is installed by scripts/setup")
@pytest.mark.parametrize("store_target", ["local"], indirect=True)
def test_rocksdb_sst_dump_accepts_gravfs_ranges_and_metaranges(repo, tmp_path):
    for i in range(400):
        repo.write_file("main", f"p/{i:04d}", b"x%d" % i)
    repo.commit("main", "c")
    ranges = _committed_files(repo, "ranges")
    metaranges = _committed_files(repo, "metaranges")
    assert len(ranges) > 3 and len(metaranges) == 1
    for stored in ranges[:4] + ranges[-1:] + metaranges:
        # sst_dump only opens names ending in .sst; the store names objects by ID alone
        path = str(tmp_path / (os.path.basename(os.path.dirname(stored)) + "-" +
                               os.path.basename(stored) + ".sst"))
        os.symlink(stored, path)
        v = subprocess.run([SST_DUMP, f"--file={path}", "--command=verify"], capture_output=True,
                           text=True, cwd=tmp_path)
        assert v.returncode == 0 and "The file is ok" in v.stdout, v.stdout + v.stderr
        # keys and values in hex: a raw value (a hash, a time) may hold "=>" or a newline
        s = subprocess.run([SST_DUMP, f"--file={path}", "--command=scan", "--show_properties",
                            "--output_hex"], capture_output=True, cwd=tmp_path)
        out = s.stdout.decode("utf-8", "replace")
        assert s.returncode == 0, s.stderr
        kind = "metaranges" if "metaranges-" in path else "ranges"
        assert f"# type: 0x{kind.encode().hex().upper()}" in out  # sst_dump shows user props in hex
        assert out.count("=>") == int(json.loads(dump("--properties", "--json", path))["count"])
        ours = [json.loads(l) for l in dump(path).splitlines()]
        assert len(ours) == int(json.loads(dump("--properties", "--json", path))["count"])
        theirs = [bytes.fromhex(line.split("'")[1]).decode() for line in out.splitlines()
                  if " => " in line]
        assert theirs == [r["key"] for r in ours]
