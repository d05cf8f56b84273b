"""gravfs spark import of a local tree: the same tree as the single-process import.

The key property: whatever the partitioning, the Spark import gives the same
metarange ID as ``gravfs import`` of the same tree (and so an empty diff).
Small range parameters make the test trees span many ranges.
"""

from __future__ import annotations

import os
import random
import re

import pytest

from gravfs.errors import GravfsError, NotFoundError
from gravfs.fs.entry import ADDRESS_FULL
from gravfs.fs.importer import import_tree as local_import
from gravfs.spark import import_tree
from gravfs.version.committer import NothingToCommitError
from tests.repo_util import head_metarange

pytestmark = pytest.mark.spark


def make_tree(root: str, seed: int = 1, dirs: int = 12, files: int = 40) -> int:
    """A tree with nested dirs, duplicate contents, modes, symlinks and empty dirs;
    returns how many entries an import makes of it."""
    rnd = random.Random(seed)
    n = 0
    for d in range(dirs):
        sub = os.path.join(root, f"part={d:03d}", f"h{d % 3}")
        os.makedirs(sub)
        for f in range(files):
            p = os.path.join(sub, f"part-{f:05d}.bin")
            with open(p, "wb") as fh:
                fh.write(b"same" if f % 7 == 0 else rnd.randbytes(rnd.randrange(0, 300)))
            if f % 11 == 0:
                os.chmod(p, 0o600)
            os.utime(p, ns=(1_700_000_000_000_000_000 + f,
                            1_600_000_000_000_000_000 + d * 1000 + f))
            n += 1
        os.symlink(f"part-{0:05d}.bin", os.path.join(sub, "latest"))
        os.makedirs(os.path.join(root, f"part={d:03d}", "empty"))
        n += 2
    with open(os.path.join(root, "README"), "w") as fh:
        fh.write("top-level file\n")
    os.makedirs(os.path.join(root, "empty-top"))
    return n + 2


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("src") / "tree")
    os.makedirs(root)
    return root, make_tree(root)


@pytest.mark.parametrize("partitions", [2, 3, 7])
def test_same_metarange_as_single_process_import(spark, repo, tree, partitions):
    src, n = tree
    repo.create_branch("single", "main")
    repo.create_branch("spark", "main")
    local_import(repo, src, "single", progress=False)
    res = import_tree(spark, repo, src, "spark", partitions=partitions)
    assert res.files == n
    assert res.partitions == partitions  # split at the listed directories' keys
    assert res.ranges > 40  # many ranges, so many seams
    assert head_metarange(repo, "spark") == head_metarange(repo, "single")
    assert list(repo.committed.diff(head_metarange(repo, "single"), head_metarange(repo, "spark"))) == []
    assert res.commit.metadata["import_source"] == os.path.abspath(src)
    # the contents were uploaded: read one back through the data plane
    e = repo.stat("spark", "part=004/h1/part-00003.bin").entry
    with open(os.path.join(src, "part=004/h1/part-00003.bin"), "rb") as fh:
        assert repo.data.read(e.address) == fh.read()


def test_into_prefix_over_existing_content(spark, repo, tree):
    """The import replaces BRANCH:PREFIX, as gravfs import does: files under the prefix
    that the source lacks are removed, paths elsewhere stay."""
    src, n = tree
    other = os.path.join(os.path.dirname(src), "other")
    os.makedirs(other, exist_ok=True)
    make_tree(other, seed=2, dirs=3, files=30)
    with open(os.path.join(other, "only-in-other"), "w") as fh:
        fh.write("gone after the import\n")
    local_import(repo, other, "main", "data/x", progress=False)
    local_import(repo, other, "main", "zz", progress=False)
    repo.create_branch("single", "main")
    repo.create_branch("spark", "main")
    local_import(repo, src, "single", "data/x", progress=False)
    repo.write_file("spark", "scratch", b"x")
    with pytest.raises(GravfsError, match="'spark' has uncommitted changes"):
        import_tree(spark, repo, src, "spark", "data/x", partitions=3)
    repo.remove("spark", "scratch")  # written and removed again: nothing to commit
    import_tree(spark, repo, src, "spark", "data/x", partitions=3)
    assert head_metarange(repo, "spark") == head_metarange(repo, "single")
    mr = head_metarange(repo, "spark")
    under = [r.key for r in repo.committed.iter(mr, b"data/x/") if r.key.startswith(b"data/x/")]
    assert len(under) == n
    assert repo.committed.get(mr, b"data/x/only-in-other") is None
    assert repo.committed.get(mr, b"zz/only-in-other") is not None


def test_by_reference_tree(spark, repo, tree):
    """Entries carry file:// URLs with size, mtime and the mtime-size version tag;
    nothing is copied into the store."""
    src, n = tree
    repo.create_branch("single", "main")
    res = import_tree(spark, repo, src, "main", "ref", partitions=2, by_reference=True)
    assert res.files == n
    assert not list(repo.store.list("data/"))
    local_import(repo, src, "single", "ref", progress=False, by_reference=True)
    assert head_metarange(repo, "single") == head_metarange(repo, "main")  # one tree
    for rel in ("README", "part=004/h1/part-00003.bin", "part=000/h0/part-00011.bin"):
        path = os.path.join(os.path.abspath(src), rel)
        st = os.stat(path)
        e = repo.stat("main", f"ref/{rel}").entry
        assert e.address_type == ADDRESS_FULL
        assert e.address == "file://" + path
        assert (e.size, e.mtime_ns, e.mode) == (st.st_size, st.st_mtime_ns, st.st_mode)
        assert e.e_tag == f"{st.st_mtime_ns:x}-{st.st_size:x}"
    link = repo.stat("main", "ref/part=002/h2/latest").entry
    assert link.symlink_target == "part-00000.bin"
    assert res.commit.metadata["import_by_reference"] == "true"


def test_bad_input_commits_nothing(spark, repo, tmp_path, tree):
    src, _ = tree
    head = repo.head("main", fresh=True)
    with pytest.raises(NotFoundError, match="branch 'nosuch' not found"):
        import_tree(spark, repo, src, "nosuch")
    with pytest.raises(NotFoundError, match="missing: no such file or directory"):
        import_tree(spark, repo, str(tmp_path / "missing"), "main")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(GravfsError, match="a-file: not a directory"):
        import_tree(spark, repo, str(tmp_path / "a-file"), "main")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GravfsError, match="nothing to commit"):
        import_tree(spark, repo, str(empty), "main")
    assert repo.head("main", fresh=True) == head


def test_head_moved_during_import(spark, repo, tree, monkeypatch):
    """A commit landing while the import runs: rebased onto when it touches other paths,
    a conflict (nothing committed) when it changed an imported path."""
    import gravfs.spark.treejob as imp
    from gravfs.errors import ConflictError

    src, _ = tree
    real = imp.stitch_partitions
    path = {"p": "elsewhere.txt"}

    def racing(*a, **kw):
        out = real(*a, **kw)
        repo.write_file("main", path["p"], b"written meanwhile")
        repo.commit("main", "concurrent")
        return out

    monkeypatch.setattr(imp, "stitch_partitions", racing)
    res = import_tree(spark, repo, src, "main", partitions=2)
    concurrent = repo.commits.get(res.commit.parents[0])
    assert concurrent.message == "concurrent"
    assert repo.stat("main", "elsewhere.txt").entry.size == len(b"written meanwhile")
    assert repo.stat("main", "README").entry.size == len("top-level file\n")
    path["p"] = "part=001/h1/part-00002.bin"
    with pytest.raises(ConflictError, match="part=001/h1/part-00002.bin"):
        import_tree(spark, repo, src, "main", "", partitions=2)
    assert repo.commits.get(repo.head("main", fresh=True)).message == "concurrent"
    # a path the import removes (the source lacks it), changed meanwhile: a conflict too
    path["p"] = "elsewhere.txt"
    with pytest.raises(ConflictError, match="elsewhere.txt"):
        import_tree(spark, repo, src, "main", "", partitions=2)
    # a file committed meanwhile above the prefix, or where the tree has a directory:
    # each fine alone, together a path both a file and a directory; nothing lands
    head = repo.head("main", fresh=True)
    for late, prefix, pair in (("into", "into/deep", r"into \(and into/deep/README\)"),
                               ("fresh/part=002/h2", "fresh", r"fresh/part=002/h2 \(and "
                                                              r"fresh/part=002/h2/latest\)")):
        path["p"] = late
        with pytest.raises(ConflictError, match=f"both a file and a directory: {pair}"):
            import_tree(spark, repo, src, "main", prefix, partitions=2)
        assert repo.commits.get(repo.head("main", fresh=True)).parents == (head,)
        repo.reset("main")
        repo.remove("main", late)
        head = repo.commit("main", "undo").id
    # and a file above the prefix when the import starts: refused before any Spark work
    repo.write_file("main", "into", b"a file")
    repo.commit("main", "into")
    with pytest.raises(GravfsError, match="into: not a directory"):
        import_tree(spark, repo, src, "main", "into/deep", partitions=2)


def test_names_that_are_not_utf8(spark, repo, tmp_path):
    """Listing units and paths travel to the executors as surrogate-escaped text."""
    src = tmp_path / "odd"
    weird = os.fsencode(str(src)) + b"/caf\xe9"
    os.makedirs(weird)
    for name in (b"r\xe9sum\xe9.txt", b"new\nline", b"sp ace"):
        with open(weird + b"/" + name, "wb") as f:
            f.write(name)
    (src / "plain").mkdir()
    (src / "plain" / "x").write_bytes(b"x")
    repo.create_branch("single", "main")
    local_import(repo, str(src), "single", progress=False)
    res = import_tree(spark, repo, str(src), "main", partitions=2)
    assert res.files == 4
    assert head_metarange(repo, "main") == head_metarange(repo, "single")
    assert repo.committed.get(head_metarange(repo, "main"), b"caf\xe9/r\xe9sum\xe9.txt") is not None


def test_special_files_are_left_out_counted_and_named(spark, repo, tmp_path):
    """FIFOs and sockets (nothing a commit can hold) are passed over, as ``gravfs
    import`` does; the result counts and names them, those the driver's split meets
    and those deep inside an executor's recursive listing, once each."""
    import socket

    from gravfs.fs.importer import SPECIAL

    src = tmp_path / "src"
    deep = src / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    for d in (src, src / "a", deep):
        (d / "f").write_bytes(b"f")
    os.mkfifo(src / "top.fifo")
    os.mkfifo(deep / "deep.fifo")
    holder = socket.socket(socket.AF_UNIX)
    try:
        holder.bind(str(src / "a" / "s.sock"))
        repo.create_branch("single", "main")
        local_import(repo, str(src), "single", progress=False)
        res = import_tree(spark, repo, str(src), "main", partitions=2)
    finally:
        holder.close()
    assert res.files == 3
    assert head_metarange(repo, "main") == head_metarange(repo, "single")
    assert (res.left_out, res.left_out_shown, res.left_out_as) == (
        3, ("a/b/c/d/e/deep.fifo", "a/s.sock", "top.fifo"), SPECIAL)
    lone = tmp_path / "lone"
    lone.mkdir()
    os.mkfifo(lone / "p")
    head = repo.head("main", fresh=True)
    with pytest.raises(NothingToCommitError, match=re.escape(
            f"{lone} holds only what an import leaves out (1 path: {SPECIAL})")):
        import_tree(spark, repo, str(lone), "main", "lone")
    assert repo.head("main", fresh=True) == head


def test_the_repositorys_own_directories_are_left_out(spark, tmp_path):
    """A source holding the repository's store and state directory (``gravfs init`` in
    the data's directory, then an import of '.') imports neither: one deep enough to be
    inside an executor's recursive listing, one the driver's split meets. A source inside
    the store is refused."""
    from gravfs.fs.repository import Repository
    from tests.repo_util import small_settings

    lake = tmp_path / "lake"
    store = lake / "x" / "y" / "z" / "w" / "store"
    (lake / "data").mkdir(parents=True)
    for i in range(5):
        (lake / "data" / f"f{i}").write_bytes(b"%d" % i)
    r = Repository.init(str(store), str(lake / "state"), settings=small_settings())
    (lake / "x" / "y" / "kept").write_bytes(b"kept")
    try:
        r.create_branch("single", "main")
        local_import(r, str(lake), "single", progress=False)
        res = import_tree(spark, r, str(lake), "main", partitions=2)
        assert res.files == 6
        assert head_metarange(r, "main") == head_metarange(r, "single")
        keys = [rec.key for rec in r.committed.iter(head_metarange(r, "main"))]
        assert b"x/y/kept" in keys and not any(b"store" in k or b"state" in k for k in keys)
        with pytest.raises(GravfsError, match="it is in this repository's store"):
            import_tree(spark, r, str(store / "data"), "main")
    finally:
        r.close()
