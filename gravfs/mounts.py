"""What the kernel has mounted where (/proc/self/mountinfo), read without touching a mount."""

from __future__ import annotations

import os
import re
from typing import Iterator, NamedTuple, Optional

MOUNTINFO = "/proc/self/mountinfo"

# Filesystems whose files other hosts share: LMDB (staging) must not live on one (its
# lock table is shared memory in a file, which hosts do not share coherently)
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "fuse.ceph", "glusterfs",
    "fuse.glusterfs", "lustre", "gpfs", "afs", "fuse.sshfs", "sshfs", "fuse.s3fs",
    "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "beegfs", "orangefs", "pvfs2"})


class Mount(NamedTuple):
    point: str  # as the kernel lists it
    device: str  # "major:minor"
    fstype: str  # "ext4", "nfs4", "fuse.gravfs"


def _unescaped(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts(text: Optional[str] = None) -> Iterator[Mount]:
    """Every mount, in mountinfo's order (a later one at a place is on top); ``text``:
    mountinfo's content instead of this process's."""
    if text is None:
        try:
            with open(MOUNTINFO) as f:
                text = f.read()
        except OSError:
            return
    for line in text.splitlines():
        fields = line.split()
        try:  # the type follows the "-" that ends the optional fields
            yield Mount(_unescaped(fields[4]), fields[2], fields[fields.index("-", 6) + 1])
        except (IndexError, ValueError):
            continue


def mount_at(point: str, text: Optional[str] = None) -> Optional[Mount]:
    """What is mounted at ``point`` exactly (the one on top), or None."""
    found = None
    for m in mounts(text):
        if m.point == point:
            found = m
    return found


def mount_holding(path: str, text: Optional[str] = None) -> Optional[Mount]:
    """The mount a path is on: the deepest mount point above its real path."""
    real = os.path.realpath(path)
    found = None
    for m in mounts(text):
        inside = m.point == "/" or real == m.point or real.startswith(m.point.rstrip("/") + "/")
        if inside and (found is None or len(m.point) >= len(found.point)):
            found = m
    return found
