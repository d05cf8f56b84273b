"""mountinfo read: each mount's point, device and type; the mount a path is on."""

from __future__ import annotations

from gravfs.mounts import mount_at, mount_holding, mounts

INFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 27 0:50 / /home rw,relatime shared:20 master:3 - nfs4 srv:/home rw,vers=4.2
41 40 8:2 / /home/local\\040disk rw,relatime - ext4 /dev/sda2 rw
42 27 0:60 / /mnt/lake rw,nosuid - fuse.gravfs gravfs:/data rw
43 27 0:61 / /mnt/lake rw,nosuid - tmpfs tmpfs rw
a line that is no mount
"""


def test_fields_escapes_and_optional_fields():
    got = list(mounts(INFO))
    assert [(m.point, m.device, m.fstype) for m in got] == [
        ("/proc", "0:21", "proc"), ("/", "8:1", "ext4"), ("/home", "0:50", "nfs4"),
        ("/home/local disk", "8:2", "ext4"), ("/mnt/lake", "0:60", "fuse.gravfs"),
        ("/mnt/lake", "0:61", "tmpfs")]


def test_the_mount_on_top_and_the_deepest_mount_above_a_path():
    assert mount_at("/mnt/lake", INFO).fstype == "tmpfs"  # the later one is on top
    assert mount_at("/mnt", INFO) is None
    assert mount_holding("/home/u/.local/state/gravfs", INFO).fstype == "nfs4"
    assert mount_holding("/home/local disk/state", INFO).fstype == "ext4"
    assert mount_holding("/home", INFO).point == "/home"
    assert mount_holding("/homework/x", INFO).point == "/"  # a prefix of the name only
    assert mount_holding("/var/lib/gravfs", INFO).fstype == "ext4"


def test_this_process_mountinfo():
    assert mount_holding("/proc/self").fstype == "proc"
    assert mount_at("/proc").fstype == "proc"
