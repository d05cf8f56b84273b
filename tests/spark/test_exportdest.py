"""gravfs.spark.exportdest's directory destination: an entry's path never leads out of
DEST, whatever DEST holds (no Spark here)."""

from __future__ import annotations

import hashlib
import os

from gravfs.spark.exportdest import DirDest


def _dest(tmp_path):
    d = DirDest(str(tmp_path / "out"))
    d.check()
    d.prepare()
    return d


def test_a_symlink_in_dest_is_never_followed(tmp_path):
    """A symlink "a" in DEST to a directory outside: reads, deletions and writes of
    a/... stay inside DEST (the write replaces the link by a directory)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b").write_bytes(b"theirs")
    (outside / "sub").mkdir()
    d = _dest(tmp_path)
    os.symlink(outside, os.path.join(d.root, "a"))
    sha = hashlib.sha256(b"theirs").hexdigest()
    assert not d.present(b"a/b", "file", 6, sha, mode=0o644, mtime_ns=1)
    d.delete_entry(b"a/b")
    assert not d.remove_dir_if_empty(b"a/sub")
    assert (outside / "b").read_bytes() == b"theirs" and (outside / "sub").is_dir()
    d.write_file(b"a/b", [b"ours"], 4, 0o600, 7)
    assert (outside / "b").read_bytes() == b"theirs"
    inside = os.path.join(d.root, "a", "b")
    assert not os.path.islink(os.path.join(d.root, "a"))
    assert open(inside, "rb").read() == b"ours" and os.stat(inside).st_mtime_ns == 7
    assert d.present(b"a/b", "file", 4, hashlib.sha256(b"ours").hexdigest(), mode=0o600,
                     mtime_ns=7)


def test_a_file_where_the_tree_has_a_directory_is_replaced(tmp_path):
    d = _dest(tmp_path)
    d.write_file(b"x", [b"1"], 1, 0o644, 1)
    d.write_dir(b"x/y/", 0o750)  # the directory marker of x/y
    assert os.stat(os.path.join(d.root, "x", "y")).st_mode & 0o7777 == 0o750
    d.write_symlink(b"x/y/l", "../t", 3)
    assert os.readlink(os.path.join(d.root, "x", "y", "l")) == "../t"
    assert d.present(b"x/y/l", "symlink", 0, None, target="../t", mtime_ns=3)
    d.delete_entry(b"x/y/l")
    assert d.remove_dir_if_empty(b"x/y") and not d.remove_dir_if_empty(b"nothing/here")


def test_shadowed_files_of_a_range_and_of_some_keys(tmp_path):
    """A file "f" whose keys under "f/" lie in a later range than its own (keys such as
    "f.0001" sort between "f" and "f/"): found with one seek past the range's end, as
    for keys that are only some of the tree's (an incremental export's changes)."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository
    from gravfs.spark.export import shadowed_files
    from tests.repo_util import head_metarange, small_settings

    repo = Repository.init(str(tmp_path / "store"), str(tmp_path / "ws"),
                           settings=small_settings())
    addr, n = repo.data.put_bytes(b"x")
    e = EntryInfo(address=addr, size=n, mtime_ns=1, mode=0o100644, kind=KIND_FILE)
    keys = [b"f", b"g", b"g/", b"h"] + [b"f.%04d" % i for i in range(3000)] + [b"f/z", b"h/i"]
    repo.stage("main", [(k, e) for k in keys])
    repo.commit("main", "c")
    mr_id = head_metarange(repo, "main")
    rs = repo.committed.ranges
    ranges = [list(k for k, _ in rs.range_items(rid)) for rid in rs.metarange(mr_id).ids]
    first = next(r for r in ranges if b"f" in r)
    assert b"f/z" not in first  # the case this test is about
    assert b"f" in shadowed_files(rs, mr_id, first, whole_range=True)
    assert b"f.0001" not in shadowed_files(rs, mr_id, first, whole_range=True)
    # "g/" marks an empty directory "g": that takes the name too
    assert shadowed_files(rs, mr_id, [b"f", b"f.0001", b"g", b"g/", b"h"],
                          whole_range=False) == {b"f", b"g", b"h"}
    repo.close()
