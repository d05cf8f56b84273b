"""The inode table forgets what the kernel forgets (issue 15: daemon memory per inode).

Counts the table's records, never timing: after FORGET brings an inode's lookup
count to zero, nothing of it may stay (inode, path index, link group,
remembered entry), including hard-linked and renamed inodes.
"""

from __future__ import annotations

import json
import os

import pytest

from gravfs.fuse.inodes import FIRST_DYNAMIC, KINDS, ROOT, InodeTable
from gravfs.fuse.trees import Tree
from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import wait_for

EMPTY = {"inodes": 0, "paths": 0, "path_dicts": 0, "groups": 0, "linked_here": 0, "entries": 0}


def _forget_all(table: InodeTable) -> None:
    for node in table.all():
        if node.ino >= FIRST_DYNAMIC:
            table.forget(node.ino, node.lookups)


def test_forget_drops_every_record():
    table = InodeTable(max_entries=50)
    tree = Tree("branch", "main", writable=True)
    d = table.ensure(tree, b"d", "dir", 1, b"d")
    d.lookups += 1
    for i in range(200):
        n = table.ensure(tree, b"d/f%03d" % i, "file", d.ino, b"f%03d" % i)
        n.lookups += 2  # the kernel may forget in several FORGETs
        table.remember(n, None, 1.0)
    a = table.ensure(tree, b"d/a", "file", d.ino, b"a", group="g1")
    a.lookups += 1
    b = table.ensure(tree, b"e", "file", 1, b"e", group="g1")  # a second name: same inode
    assert b is a and a.names == {b"e"}
    b.lookups += 1
    table.rekey(tree, b"d", b"x", 1, b"x")  # moves the directory and what is below it
    assert table.find(tree, b"x/f007", "file").name == b"f007"
    assert table.counts()["entries"] <= 50  # remembered entries are bounded
    newest = table.find(tree, b"x/f199", "file")
    assert table.remembered(newest) is not None  # the oldest go first
    assert table.remembered(table.find(tree, b"x/f000", "file")) is None
    for node in table.all():
        if node.kind == "file" and node.ino != a.ino:
            table.forget(node.ino, 1)
    assert table.counts()["inodes"] == 202  # one lookup left on each
    _forget_all(table)
    assert table.counts() == EMPTY


def test_open_inode_outlives_forget_then_goes():
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    n = table.ensure(tree, b"f", "file", 1, b"f")
    n.lookups, n.opens = 1, 1
    table.remember(n, None, 1.0)
    table.forget(n.ino, 1)
    assert table.get(n.ino) is n and table.remembered(n) is not None
    n.opens = 0
    table.maybe_drop(n)
    assert table.counts() == EMPTY


def test_link_group_keeps_its_number_after_forget():
    """A walk may stat one name of a group before a FORGET and another after it: the
    numbers must match (tar, rsync -H and du find hard links by st_ino)."""
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    a = table.ensure(tree, b"a", "file", 1, b"a", group="g1")  # looked up: derived number
    a.lookups += 1
    first = a.ino
    table.forget(first, 1)
    assert table.get(first) is None
    again = table.ensure(tree, b"b", "file", 1, b"b", group="g1")
    assert again.ino == first
    again.lookups += 1
    table.forget(again.ino, 1)
    f = table.ensure(tree, b"f", "file", 1, b"f")  # created, then linked through the mount
    f.lookups += 1
    table.add_name(f, b"g", "g2")
    number = f.ino
    table.forget(number, 1)
    assert table.counts()["inodes"] == 0 and table.counts()["linked_here"] == 1
    assert table.ensure(tree, b"g", "file", 1, b"g", group="g2").ino == number
    other = Tree("commit", "c", commit=type("C", (), {"id": "c1"})())
    assert table.ensure(other, b"a", "file", 1, b"a", group="g1").ino != first  # per tree


def test_open_count_kind_and_flags_share_a_slot_without_mixing():
    """Inode keeps its kind and open count in the bits above its flags, and a name that
    is not its key's tail in its rare notes (six slots, not ten)."""
    tree = Tree("branch", "main", writable=True)
    table = InodeTable()
    for kind in KINDS:
        n = table.ensure(tree, b"a/" + kind.encode(), kind, 1, kind.encode())
        assert (n.kind, n.is_dir, n.opens, n.linked, n.pinned, n.foreign, n._extra) == (
            kind, kind == "dir", 0, True, False, False, None)
        n.opens += 3
        n.foreign, n.linked = True, False
        assert (n.kind, n.opens, n.linked, n.pinned, n.foreign) == (kind, 3, False, False, True)
        n.opens -= 3
        n.pinned = True
        assert (n.kind, n.opens, n.linked, n.pinned, n.foreign) == (kind, 0, False, True, True)
    n.name = b"shown%2Fescaped"  # not the key's tail: kept
    assert n.name == b"shown%2Fescaped"
    n.key, n.name = b"a/c", b"c"
    assert n.name == b"c" and not n._extra
    with pytest.raises(KeyError):
        table.ensure(tree, b"x", "door", 1, b"x")


def test_a_superseded_inode_leaves_its_names_and_goes_when_forgotten():
    """supersede: every name (a link group's too) gets a new inode at its next
    ensure; the old one stays for its lookups and handles, then leaves no record."""
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    a = table.ensure(tree, b"a", "file", 1, b"a", group="g1")
    assert table.ensure(tree, b"b", "file", 1, b"b", group="g1") is a
    a.lookups, a.opens = 2, 1
    table.remember(a, None, 1.0)
    table.supersede(a)
    assert (a.superseded, a.linked) == (True, False)
    new_a = table.ensure(tree, b"a", "file", 1, b"a", group="g1")
    assert new_a.ino != a.ino and not new_a.superseded
    assert table.ensure(tree, b"b", "file", 1, b"b", group="g1") is new_a
    assert table.get(a.ino) is a
    a.opens = 0
    table.forget(a.ino, 2)
    table.forget(new_a.ino, 0)
    assert table.get(a.ino) is None and table.counts()["entries"] == 0


def test_parent_is_the_directory_of_the_key_or_a_roots_noted_one():
    tree = Tree("branch", "main", writable=True)
    table = InodeTable()
    table.add_virtual(ROOT, b"", "root", ROOT)
    table.add_virtual(2, b"branches", "branches", ROOT)
    root = table.ensure(tree, b"", "dir", 2, b"main")
    a = table.ensure(tree, b"a", "dir", root.ino, b"a")
    ab = table.ensure(tree, b"a/b", "dir", a.ino, b"b")
    f = table.ensure(tree, b"a/b/f", "file", ab.ino, b"f")
    assert [table.parent_of(n) for n in (table.get(2), root, a, ab, f)] == [
        ROOT, 2, root.ino, a.ino, ab.ino]
    assert root.name == b"main" and a._extra is None and f._extra is None
    table.rekey(tree, b"a/b", b"c", root.ino, b"c")  # moved up: the parent follows the key
    assert (table.parent_of(ab), table.parent_of(f), f.key) == (root.ino, ab.ino, b"c/f")
    table.unlink(ab)  # its directory gone (f is still open, say): the tree's root stands in
    assert table.find(tree, b"c", "dir") is None and table.parent_of(f) == root.ino


def test_a_name_is_noted_only_where_it_is_not_the_tail_of_the_key():
    """A listed name is its key's last component and costs the inode nothing; a name
    that only ends the same bytes (an escaped name shown for another key) is kept."""
    tree = Tree("branch", "main", writable=True)
    table = InodeTable()
    tail = table.ensure(tree, b"d/part-1", "file", 7, b"part-1")
    whole = table.ensure(tree, b"part-2", "file", 7, b"part-2")
    shown = table.ensure(tree, b"d/xpart-3", "file", 7, b"part-3")  # ends so, not a tail
    other = table.ensure(tree, b"d/raw%2F", "file", 7, b"escaped")
    assert tail._extra is None and whole._extra is None and tail.name == b"part-1"
    assert (shown.name, other.name) == (b"part-3", b"escaped")
    shown.name = b"xpart-3"  # renamed to its key's tail: the note goes
    assert shown.name == b"xpart-3" and "name" not in (shown._extra or {})
    assert len({n.ino for n in (tail, whole, shown, other)}) == 4


def test_forget_tells_when_the_table_fell_to_a_quarter_of_its_peak():
    """The mount drops its caches then (GravfsOperations.let_go): once per fall, not
    at every FORGET, and not for a small table."""
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    nodes = [table.ensure(tree, b"f%05d" % i, "file", 1, b"f%05d" % i) for i in range(8000)]
    for n in nodes:
        n.lookups = 1
    told = [i for i, n in enumerate(nodes) if table.forget(n.ino, 1)]
    assert told == [6000]  # 1,999 left of a peak of 8,000
    assert table.counts() == EMPTY
    small = InodeTable()
    few = [small.ensure(tree, b"g%d" % i, "file", 1, b"g%d" % i) for i in range(100)]
    for n in few:
        n.lookups = 1
    assert not any([small.forget(n.ino, 1) for n in few])


def test_one_forget_batch_drops_plain_and_noted_inodes_alike():
    """FORGET comes in batches of up to ~55k (InodeTable.forget_many): the common inode
    is dropped inline, the rest the long way; a batch mixing them leaves what one
    forget at a time would leave, and the table then shrinks once."""
    table = InodeTable()
    tree = Tree("branch", "main", writable=True)
    root = table.add_virtual(FIRST_DYNAMIC - 1, b"main", "branch", ROOT, tree)
    plain = [table.ensure(tree, b"f%05d" % i, "file", root.ino, b"f%05d" % i)
             for i in range(6000)]
    for n in plain:
        n.lookups = 1
        table.remember(n, None, 1.0)
    kept = table.ensure(tree, b"kept", "file", root.ino, b"kept")
    kept.lookups = 3
    held = table.ensure(tree, b"held", "file", root.ino, b"held")
    held.lookups, held.opens = 1, 1
    linked = table.ensure(tree, b"a", "file", root.ino, b"a", group="g1")
    table.ensure(tree, b"b", "file", root.ino, b"b", group="g1").lookups = 2
    odd = table.ensure(tree, b"d/x", "dir", root.ino, b"X")  # a name not its key's tail
    odd.lookups = 1
    pairs = [(n.ino, 1) for n in plain] + [
        (kept.ino, 1), (held.ino, 1), (linked.ino, 2), (odd.ino, 1), (root.ino, 1),
        (1 << 40, 1)]  # a number never handed out: ignored
    table.forget_many(pairs)
    assert table.shrink() is True
    assert [table.get(n.ino) for n in plain] == [None] * 6000
    assert table.find(tree, b"f00000", "file") is None
    assert (table.get(kept.ino), kept.lookups) == (kept, 2)
    assert table.get(held.ino) is held and held.lookups == 0
    assert table.get(linked.ino) is None and table.find(tree, b"b", "file") is None
    assert table.get(odd.ino) is None and table.find(tree, b"d/x", "dir") is None
    assert table.get(root.ino) is root  # pinned
    table.forget_many([(kept.ino, 2)])
    assert table.shrink() is False  # no new fall
    held.opens = 0
    table.maybe_drop(held)
    counts = table.counts()
    assert counts["inodes"] == 1 and counts["paths"] == 1  # the root alone
    assert counts["groups"] == 0 and counts["entries"] == 0


def _counts(m) -> dict:
    return json.loads(os.getxattr(m.mnt, "user.gravfs.inodes"))


def _forget_dentries() -> None:
    """Make the kernel drop its unused dentries and inodes: FORGET to the daemon."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def test_mount_forgets_inodes_the_kernel_drops(gravfs_mount):
    m = gravfs_mount
    top = os.path.join(m.mnt, "branches", "main")
    for d in range(4):
        os.mkdir(os.path.join(top, "p%d" % d))
        for i in range(50):
            with open(os.path.join(top, "p%d" % d, "f%02d" % i), "wb") as f:
                f.write(b"x")
    os.link(os.path.join(top, "p0", "f00"), os.path.join(top, "p1", "hard"))
    m.umount()
    m.remount()  # the kernel starts from nothing
    base = _counts(m)
    assert base["inodes"] < 10
    seen = 0
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            os.lstat(os.path.join(root, name))
            seen += 1
    assert seen == 205
    assert _counts(m)["inodes"] >= 204
    _forget_dentries()
    # the tree root stays known (the kernel keeps branches/main); everything below goes
    assert wait_for(lambda: _counts(m)["inodes"] <= base["inodes"] + 2, timeout=30), _counts(m)
    c = _counts(m)
    assert c["paths"] <= c["inodes"] and c["groups"] == 0, c
    assert c["entries"] <= c["inodes"], c


def test_mount_forgets_thousands_of_inodes_at_once(gravfs_mount):
    """Thousands of inodes forgotten at once (the kernel hands them back in batches):
    all of them go, and the files read as before."""
    from gravfs.fs.entry import KIND_FILE, EntryInfo
    from gravfs.fs.repository import Repository

    m = gravfs_mount
    m.umount()
    n = 3000
    repo = Repository.open(m.store, m.state_dir)
    try:
        e = EntryInfo(address=repo.data.put_bytes(b"x")[0], size=1, mtime_ns=1, mode=0o100644,
                      kind=KIND_FILE)
        repo.stage("main", [(b"d/f%05d" % i, e) for i in range(n)])
        repo.commit("main", "many")
    finally:
        repo.close()
    m.remount()
    d = os.path.join(m.mnt, "branches", "main", "d")
    base = _counts(m)
    names = os.listdir(d)
    assert len(names) == n
    for name in names:
        os.lstat(os.path.join(d, name))
    assert _counts(m)["inodes"] >= base["inodes"] + n
    _forget_dentries()
    assert wait_for(lambda: _counts(m)["inodes"] <= base["inodes"] + 3, timeout=30), _counts(m)
    with open(os.path.join(d, "f00007"), "rb") as f:
        assert f.read() == b"x"
    m.assert_clean_log()


def test_mount_link_group_number_survives_forget(gravfs_mount):
    """Each name of a hard-linked file is stat'ed after the kernel forgot the inode:
    one number throughout, for a link made through this daemon and after a remount."""
    m = gravfs_mount
    top = os.path.join(m.mnt, "branches", "main")
    os.mkdir(os.path.join(top, "d"))
    with open(os.path.join(top, "f"), "wb") as f:
        f.write(b"x")
    os.link(os.path.join(top, "f"), os.path.join(top, "d", "g"))

    def numbers() -> set:
        seen = set()
        for name in ("f", "d/g", "f"):
            base = _counts(m)["inodes"]
            seen.add(os.lstat(os.path.join(top, name)).st_ino)
            _forget_dentries()
            assert wait_for(lambda: _counts(m)["inodes"] <= base, timeout=30), _counts(m)
        return seen

    linked_here = numbers()
    assert len(linked_here) == 1, linked_here
    m.umount()
    m.remount()
    looked_up = numbers()
    assert len(looked_up) == 1, looked_up
    assert os.lstat(os.path.join(top, "d", "g")).st_nlink == 2
