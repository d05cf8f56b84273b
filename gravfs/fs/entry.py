"""Filesystem entries: the ``data`` of a value record in a range.

Stored as a lakeFS-compatible protobuf ``Entry`` (see messages.py) so lakeFS
tools read gravfs ranges and gravfs reads lakeFS ranges.  ``EntryInfo`` is the
plain Python view the repository and FUSE layers use.

The identity of an entry is SHA-256 over gravfs's own canonical serialization
of every field (not over protobuf bytes, whose map order and unknown-field
handling are not guaranteed stable across library versions), so two entries
are "the same" exactly when everything a user can observe is the same.
"""

from __future__ import annotations

import hashlib
import stat
import struct
from dataclasses import dataclass, field, replace
from typing import Optional

from google.protobuf.message import DecodeError

from gravfs.version.committed.messages import Entry
from gravfs.version.committed.record import Record
from gravfs.errors import CorruptDataError

KIND_FILE = 0
KIND_DIRECTORY = 1
KIND_SYMLINK = 2
# special files (mknod/mkfifo/bind): no content, only mode, owner, times and rdev
KIND_FIFO = 3
KIND_SOCKET = 4
KIND_CHAR_DEVICE = 5
KIND_BLOCK_DEVICE = 6
SPECIAL_KINDS = (KIND_FIFO, KIND_SOCKET, KIND_CHAR_DEVICE, KIND_BLOCK_DEVICE)

ADDRESS_BY_PREFIX_DEPRECATED = 0
ADDRESS_RELATIVE = 1
ADDRESS_FULL = 2

_DEFAULT_MODE = {
    KIND_FILE: stat.S_IFREG | 0o644,
    KIND_DIRECTORY: stat.S_IFDIR | 0o755,
    KIND_SYMLINK: stat.S_IFLNK | 0o777,
    KIND_FIFO: stat.S_IFIFO | 0o644,
    KIND_SOCKET: stat.S_IFSOCK | 0o755,
    KIND_CHAR_DEVICE: stat.S_IFCHR | 0o644,
    KIND_BLOCK_DEVICE: stat.S_IFBLK | 0o644,
}
_KIND_OF_FMT = {stat.S_IFREG: KIND_FILE, stat.S_IFDIR: KIND_DIRECTORY, stat.S_IFLNK: KIND_SYMLINK,
                stat.S_IFIFO: KIND_FIFO, stat.S_IFSOCK: KIND_SOCKET, stat.S_IFCHR: KIND_CHAR_DEVICE,
                stat.S_IFBLK: KIND_BLOCK_DEVICE}


def kind_of_mode(mode: int) -> int:
    """The entry kind of a full st_mode (KIND_FILE for an unknown file type)."""
    return _KIND_OF_FMT.get(stat.S_IFMT(mode), KIND_FILE)


# Times are nanoseconds in 64 bits (the identity packs them so, and so do Arrow's and
# Spark's columns): 1677-09-21 to 2262-04-11. A time outside (ext4 keeps seconds to
# 2446) is clamped to that range, as a filesystem clamps times to its own.
TIME_NS_MIN, TIME_NS_MAX = -(1 << 63), (1 << 63) - 1


def clamp_time_ns(ns: int) -> int:
    return min(max(ns, TIME_NS_MIN), TIME_NS_MAX)


@dataclass(slots=True)  # slots: 520 bytes a decoded entry instead of 870 (caches hold many)
class EntryInfo:
    """What gravfs knows about one path.

    ``mode`` is a full st_mode (file-type bits included); 0 means "derive from
    kind" (lakeFS entries carry none) and is normalized on construction.
    ``address`` names the content: a relative store key (``data/aa/<hash>``)
    for ``ADDRESS_RELATIVE`` or a full URL for ``ADDRESS_FULL``.
    ``atime_ns`` None, ``ctime_ns`` 0: not recorded (older records), shown as mtime
    (``shown_atime``); an atime can be set to 0 (the epoch), a ctime cannot.
    ``rdev``: device number of a device node. ``link_group``: hard links, the
    names of one inode share this id, and each of their records lists every
    name of the group in ``links`` (sorted keys, its own included).
    """

    address: str = ""
    size: int = 0
    mtime_ns: int = 0
    mode: int = 0
    kind: int = KIND_FILE
    symlink_target: str = ""
    xattrs: dict[str, bytes] = field(default_factory=dict)
    uid: int = 0
    gid: int = 0
    e_tag: str = ""
    content_type: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    address_type: int = ADDRESS_RELATIVE
    atime_ns: Optional[int] = None
    ctime_ns: int = 0
    rdev: int = 0
    link_group: str = ""
    links: tuple = ()

    def __post_init__(self) -> None:
        self.mode, self.kind = _normal_mode(self.mode, self.kind)
        if not (TIME_NS_MIN <= self.mtime_ns <= TIME_NS_MAX and TIME_NS_MIN <= self.ctime_ns
                <= TIME_NS_MAX and (self.atime_ns is None
                                    or TIME_NS_MIN <= self.atime_ns <= TIME_NS_MAX)):
            self.mtime_ns, self.ctime_ns = clamp_time_ns(self.mtime_ns), clamp_time_ns(
                self.ctime_ns)
            if self.atime_ns is not None:
                self.atime_ns = clamp_time_ns(self.atime_ns)

    @property
    def is_dir(self) -> bool:
        return self.kind == KIND_DIRECTORY

    @property
    def is_symlink(self) -> bool:
        return self.kind == KIND_SYMLINK

    @property
    def nlink(self) -> int:
        """Names of this inode (1 unless hard-linked)."""
        return max(1, len(self.links)) if self.link_group else 1


def _normal_mode(mode: int, kind: int) -> tuple[int, int]:
    """(full st_mode, kind): a mode without file-type bits takes the kind's; a file's
    kind follows its mode's file type."""
    fmt = mode & 0o170000
    if mode == 0 or fmt == 0:
        default = _DEFAULT_MODE[kind]
        return ((mode & 0o7777) or (default & 0o7777)) | (default & 0o170000), kind
    if kind == KIND_FILE and fmt in _KIND_OF_FMT:
        return mode, _KIND_OF_FMT[fmt]
    return mode, kind


def encode_entry(info: EntryInfo) -> bytes:
    """Protobuf bytes (deterministic map order) of an entry."""
    msg = Entry(address=info.address, size=info.size, e_tag=info.e_tag,
                content_type=info.content_type, address_type=info.address_type,
                mode=info.mode, kind=info.kind, symlink_target=info.symlink_target,
                uid=info.uid, gid=info.gid)
    sec, ns = divmod(info.mtime_ns, 1_000_000_000)
    msg.last_modified.seconds = sec
    msg.last_modified.nanos = ns
    if info.metadata:
        msg.metadata.update(info.metadata)
    if info.xattrs:
        msg.xattrs.update(info.xattrs)
    if info.rdev:
        msg.rdev = info.rdev
    if info.atime_ns is not None:
        msg.atime.SetInParent()  # present even at the epoch
        msg.atime.seconds, msg.atime.nanos = divmod(info.atime_ns, 1_000_000_000)
    if info.ctime_ns:
        msg.ctime.seconds, msg.ctime.nanos = divmod(info.ctime_ns, 1_000_000_000)
    if info.link_group:
        msg.link_group = info.link_group
        msg.links.extend(info.links)
    return msg.SerializeToString(deterministic=True)


_new = object.__new__
_from_string = Entry.FromString


class _NoMap(dict):
    """The empty xattrs and metadata of a decoded entry: one shared instance, not two
    dicts a decode (every listed entry; the stat cache keeps thousands). Entries are
    changed by ``replace`` with a new mapping, never in place: this one refuses."""

    __slots__ = ()

    def _refuse(self, *args, **kwargs):
        raise TypeError("a decoded entry's empty mapping is shared: replace() it")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _refuse
    __ior__ = _refuse

    def __reduce__(self):
        return dict, ()  # (a copy need not be shared)


_NO_MAP = _NoMap()


def decode_entry(data: bytes) -> EntryInfo:
    """EntryInfo from protobuf bytes written by gravfs or lakeFS.

    Every listed entry passes here (a readdir, a range scan), so the EntryInfo is filled
    directly rather than through the dataclass's keyword ``__init__``: 2x faster. Unset
    maps, times and links are not converted."""
    try:
        msg = _from_string(data)
    except DecodeError as e:
        raise CorruptDataError(f"entry does not parse as protobuf Entry: {e}") from None
    ts = msg.last_modified
    mode, kind = msg.mode, msg.kind
    if kind or mode & 0o170000 != stat.S_IFREG:  # (a regular file's mode is already whole)
        mode, kind = _normal_mode(mode, kind)
    info = _new(EntryInfo)
    info.address = msg.address
    info.size = msg.size
    info.mtime_ns = ts.seconds * 1_000_000_000 + ts.nanos
    info.mode = mode
    info.kind = kind
    info.symlink_target = msg.symlink_target
    m = msg.xattrs  # (each read of a field builds its view anew: read once)
    info.xattrs = dict(m) if m else _NO_MAP
    info.uid = msg.uid
    info.gid = msg.gid
    info.e_tag = msg.e_tag
    info.content_type = msg.content_type
    m = msg.metadata
    info.metadata = dict(m) if m else _NO_MAP
    info.address_type = msg.address_type
    if msg.HasField("atime"):
        t = msg.atime
        info.atime_ns = t.seconds * 1_000_000_000 + t.nanos
    else:
        info.atime_ns = None
    if msg.HasField("ctime"):
        t = msg.ctime
        info.ctime_ns = t.seconds * 1_000_000_000 + t.nanos
    else:
        info.ctime_ns = 0
    info.rdev = msg.rdev
    info.link_group = msg.link_group
    m = msg.links
    info.links = tuple(m) if m else ()
    return info


assert set(EntryInfo.__dataclass_fields__) == {
    "address", "size", "mtime_ns", "mode", "kind", "symlink_target", "xattrs",
    "uid", "gid", "e_tag", "content_type", "metadata", "address_type",
    "atime_ns", "ctime_ns", "rdev", "link_group", "links"}, \
    "decode_entry fills every EntryInfo field: add the new one there"


def _lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def entry_identity(entry: bytes | EntryInfo) -> bytes:
    """32-byte SHA-256 identity over a canonical serialization of every field.

    Accepts encoded protobuf bytes or an EntryInfo; both give the same result
    for the same entry.  Field order, lengths and map ordering are fixed here,
    so the identity never depends on the protobuf library. The fields added
    later (atime, ctime, rdev, link group) are hashed only when set, so every
    older record keeps its identity.
    """
    info = decode_entry(entry) if isinstance(entry, (bytes, bytearray, memoryview)) else entry
    parts = [
        b"gravfs-entry-v1",
        struct.pack(">qqIIIIB", info.size, info.mtime_ns, info.mode, info.uid, info.gid,
                    info.address_type, info.kind),
        _lp(info.address.encode()), _lp(info.symlink_target.encode()),
        _lp(info.e_tag.encode()), _lp(info.content_type.encode()),
        struct.pack(">I", len(info.metadata)),
    ]
    for k in sorted(info.metadata):
        parts.append(_lp(k.encode()) + _lp(info.metadata[k].encode()))
    parts.append(struct.pack(">I", len(info.xattrs)))
    for k in sorted(info.xattrs):
        parts.append(_lp(k.encode()) + _lp(bytes(info.xattrs[k])))
    if info.atime_ns is not None or info.ctime_ns or info.rdev or info.link_group:
        parts.append(b"v2" + struct.pack(">qqQ", info.atime_ns or 0, info.ctime_ns, info.rdev)
                     + _lp(info.link_group.encode()) + struct.pack(">I", len(info.links)))
        parts += [_lp(bytes(k)) for k in info.links]
        if info.atime_ns == 0:
            parts.append(b"atime-epoch")  # set to 0, unlike a record without one
    return hashlib.sha256(b"".join(parts)).digest()


def same_but_times(a: bytes, b: bytes) -> bool:
    """Whether two encoded entries are one file but for its times: what both sides of a
    merge hold where each wrote the same bytes separately, which is no conflict (as in
    git; lakeFS's identity hashes an object's size, ETag, metadata and content type,
    not its times)."""
    x, y = decode_entry(a), decode_entry(b)
    return (entry_identity(replace(x, mtime_ns=0, atime_ns=None, ctime_ns=0))
            == entry_identity(replace(y, mtime_ns=0, atime_ns=None, ctime_ns=0)))


def shown_atime(info: EntryInfo) -> int:
    """The atime stat shows: the mtime when none was recorded."""
    return info.mtime_ns if info.atime_ns is None else info.atime_ns


def entry_record(key: bytes | str, info: EntryInfo) -> Record:
    """Record for ``info`` at ``key`` (str keys are UTF-8 encoded)."""
    if isinstance(key, str):
        key = key.encode()
    return Record(key, entry_identity(info), encode_entry(info))
