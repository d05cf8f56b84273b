"""Shell tools on a mounted branch: cp -r, rsync -a(AX), tar, find, ls -l, mv, rm -r, cat, du."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess

import pytest

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)


def sh(cmd: str, cwd: str | None = None) -> str:
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], capture_output=True, text=True,
                         cwd=cwd, timeout=300)
    assert res.returncode == 0, f"{cmd!r} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res.stdout


def make_tree(root: str) -> None:
    """A small but varied tree: nested dirs, an empty dir, odd names, sizes, modes, a symlink."""
    os.makedirs(os.path.join(root, "a/b/c"))
    os.makedirs(os.path.join(root, "empty"))
    os.makedirs(os.path.join(root, "sp ace/ünï"))
    for i in range(30):
        with open(os.path.join(root, "a", f"f{i:02d}.txt"), "w") as f:
            f.write(f"file {i}\n" * (i * 37))
    with open(os.path.join(root, "a/b/c/bin"), "wb") as f:
        f.write(os.urandom(3 * 1024 * 1024 + 17))
    with open(os.path.join(root, "sp ace/ünï/x y.csv"), "w") as f:
        f.write("a,b\n1,2\n")
    with open(os.path.join(root, "a/b/exec.sh"), "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(os.path.join(root, "a/b/exec.sh"), 0o755)
    os.chmod(os.path.join(root, "a/f01.txt"), 0o600)
    os.symlink("b/exec.sh", os.path.join(root, "a/link"))
    open(os.path.join(root, "a/zero"), "w").close()


def assert_same_tree(left: str, right: str, modes: bool = True, mtimes: int = 0) -> None:
    """Same names, kinds, sizes, contents, modes; mtimes compared to ``mtimes`` ns if set."""
    lw = _listing(left, modes, mtimes)
    rw = _listing(right, modes, mtimes)
    assert lw == rw
    for rel, kind, *_ in lw:
        if kind == "f":
            assert filecmp.cmp(os.path.join(left, rel), os.path.join(right, rel), shallow=False), rel


def _listing(root: str, modes: bool, mtimes: int):
    out = []
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = "l" if os.path.islink(p) else "d" if os.path.isdir(p) else "f"
            row = [os.path.relpath(p, root), kind]
            if kind == "f":
                row.append(st.st_size)
            if kind == "l":
                row.append(os.readlink(p))
            if modes and kind != "l":
                row.append(oct(st.st_mode & 0o777))
            if mtimes and kind == "f":
                row.append(st.st_mtime_ns // mtimes)
            out.append(tuple(row))
    return sorted(out)


@pytest.fixture
def src_tree(tmp_path):
    root = str(tmp_path / "src")
    make_tree(root)
    return root


def test_cp_r_find_ls_cat_du(gravfs_mount, src_tree):
    m = gravfs_mount
    dst = m.branch_path("copy")
    sh(f"cp -r '{src_tree}' '{dst}'")
    assert_same_tree(src_tree, dst, modes=True)
    found = sorted(sh(f"cd '{dst}' && find . -mindepth 1").split("\n"))
    expect = sorted(sh(f"cd '{src_tree}' && find . -mindepth 1").split("\n"))
    assert found == expect
    ls = sh(f"ls -l '{dst}/a'")
    assert "f29.txt" in ls and "-rw-------" in ls and "link -> b/exec.sh" in ls
    assert sh(f"cat '{dst}/sp ace/ünï/x y.csv'") == "a,b\n1,2\n"
    du = int(sh(f"du -sb '{dst}'").split()[0])
    src_du = int(sh(f"du -sb --apparent-size '{src_tree}'").split()[0])
    assert du >= 3 * 1024 * 1024 and abs(du - src_du) < 256 * 1024
    assert sh(f"'{dst}/a/b/exec.sh'") == "hi\n"
    cid = m.commit()
    assert_same_tree(src_tree, m.path("commits", cid, "copy"))
    m.assert_clean_log()


def test_rsync_a_roundtrip(gravfs_mount, src_tree):
    m = gravfs_mount
    if not shutil.which("rsync"):
        pytest.fail("rsync is required for this test (apt-get install rsync)")
    dst = m.branch_path("sync")
    sh(f"rsync -a '{src_tree}/' '{dst}/'")
    assert_same_tree(src_tree, dst, modes=True, mtimes=1)
    # a second run finds nothing to do (sizes and mtimes kept exactly)
    out = sh(f"rsync -a --itemize-changes '{src_tree}/' '{dst}/'")
    assert out.strip() == "" or all(l.startswith(".d") for l in out.strip().splitlines()), out
    cid = m.commit()
    back = os.path.join(m.base, "back")
    sh(f"rsync -a '{m.path('commits', cid, 'sync')}/' '{back}/'")
    assert_same_tree(src_tree, back, modes=True, mtimes=1000)
    m.assert_clean_log()


def test_copies_keeping_acls_and_xattrs_work_where_acls_are_not_supported(gravfs_mount, src_tree):
    """rsync -aAX and cp --preserve=all into and out of the mount succeed (no ACLs
    there: the tools fall back to modes) and keep user xattrs."""
    m = gravfs_mount
    if not shutil.which("rsync"):
        pytest.fail("rsync is required for this test (apt-get install rsync)")
    os.setxattr(os.path.join(src_tree, "a/f02.txt"), "user.origin", b"src")
    sh(f"rsync -aAX '{src_tree}/' '{m.branch_path('ax')}/'")
    sh(f"cp -r --preserve=all '{src_tree}' '{m.branch_path('cp')}'")
    for top in ("ax", "cp"):
        assert_same_tree(src_tree, m.branch_path(top), modes=True)
        assert os.getxattr(m.branch_path(top, "a/f02.txt"), "user.origin") == b"src"
    back = os.path.join(m.base, "back")
    sh(f"rsync -aAX '{m.branch_path('ax')}/' '{back}/'")
    sh(f"cp -r --preserve=all '{m.branch_path('cp')}' '{back}-cp'")
    for out in (back, back + "-cp"):
        assert_same_tree(src_tree, out, modes=True)
        assert os.getxattr(os.path.join(out, "a/f02.txt"), "user.origin") == b"src"
    m.assert_clean_log()


def test_tar_extract_and_create(gravfs_mount, src_tree, tmp_path):
    m = gravfs_mount
    tarball = str(tmp_path / "t.tar")
    sh(f"tar -cf '{tarball}' -C '{src_tree}' .")
    os.mkdir(m.branch_path("untar"))
    sh(f"tar -xf '{tarball}' -C '{m.branch_path('untar')}'")
    second = 1_000_000_000  # GNU tar keeps whole seconds
    assert_same_tree(src_tree, m.branch_path("untar"), modes=True, mtimes=second)
    cid = m.commit()
    again = str(tmp_path / "again")
    os.mkdir(again)
    sh(f"tar -cf - -C '{m.path('commits', cid, 'untar')}' . | tar -xf - -C '{again}'")
    assert_same_tree(src_tree, again, modes=True, mtimes=second)


def test_mv_and_rm_r(gravfs_mount, src_tree):
    m = gravfs_mount
    sh(f"cp -r '{src_tree}' '{m.branch_path('t')}'")
    sh(f"mv '{m.branch_path('t/a')}' '{m.branch_path('t/moved')}'")
    assert not os.path.exists(m.branch_path("t/a"))
    assert len(os.listdir(m.branch_path("t/moved"))) == 33
    sh(f"mv '{m.branch_path('t/moved/f03.txt')}' '{m.branch_path('t/empty/')}'")
    assert os.listdir(m.branch_path("t/empty")) == ["f03.txt"]
    # mv across branches copies and deletes (EXDEV fallback)
    m.cli("branch", "create", "other")
    sh(f"mv '{m.branch_path('t/moved/b')}' '{m.branch_path('b', branch='other')}'")
    assert os.path.exists(m.branch_path("b/c/bin", branch="other"))
    assert not os.path.exists(m.branch_path("t/moved/b"))
    m.commit()
    sh(f"rm -r '{m.branch_path('t')}'")
    assert os.listdir(m.branch_path()) == []
    m.commit()
    assert m.cli("ls", "main").stdout.strip() == ""
    m.assert_clean_log()


def test_many_files_listing(gravfs_mount):
    """Listings larger than one readdir batch, while entries are removed during the walk."""
    m = gravfs_mount
    d = m.branch_path("many")
    os.mkdir(d)
    names = [f"n{i:05d}" for i in range(1500)]
    for n in names:
        open(os.path.join(d, n), "w").close()
    assert sorted(os.listdir(d)) == names
    m.commit()
    assert sorted(os.listdir(d)) == names
    with os.scandir(d) as it:
        seen = []
        for i, e in enumerate(it):
            seen.append(e.name)
            if i % 3 == 0:
                os.unlink(e.path)
    assert sorted(seen) == names
    assert len(os.listdir(d)) == 1000
