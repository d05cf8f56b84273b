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
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from gravfs.version.committed.messages import Entry
from gravfs.version.committed.record import Record
from gravfs.errors import CorruptDataError

KIND_FILE = 0
KIND_DIRECTORY = 1
KIND_SYMLINK = 2

ADDRESS_BY_PREFIX_DEPRECATED = 0
ADDRESS_RELATIVE = 1
ADDRESS_FULL = 2

_DEFAULT_MODE = {
    KIND_FILE: stat.S_IFREG | 0o644,
    KIND_DIRECTORY: stat.S_IFDIR | 0o755,
    KIND_SYMLINK: stat.S_IFLNK | 0o777,
}
_KIND_OF_FMT = {stat.S_IFREG: KIND_FILE, stat.S_IFDIR: KIND_DIRECTORY, stat.S_IFLNK: KIND_SYMLINK}


@dataclass
class EntryInfo:
    """What gravfs knows about one path.

    ``mode`` is a full st_mode (file-type bits included); 0 means "derive from
    kind" (lakeFS entries carry none) and is normalized on construction.
    ``address`` names the content: a relative store key (``data/aa/<hash>``)
    for ``ADDRESS_RELATIVE`` or a full URL for ``ADDRESS_FULL``.
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

    def __post_init__(self) -> None:
        fmt = stat.S_IFMT(self.mode)
        if self.mode == 0 or fmt == 0:
            self.mode = (self.mode & 0o7777) or (_DEFAULT_MODE[self.kind] & 0o7777)
            self.mode |= stat.S_IFMT(_DEFAULT_MODE[self.kind])
        elif self.kind == KIND_FILE and fmt in _KIND_OF_FMT:
            self.kind = _KIND_OF_FMT[fmt]

    @property
    def is_dir(self) -> bool:
        return self.kind == KIND_DIRECTORY

    @property
    def is_symlink(self) -> bool:
        return self.kind == KIND_SYMLINK


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
    return msg.SerializeToString(deterministic=True)


def decode_entry(data: bytes) -> EntryInfo:
    """EntryInfo from protobuf bytes written by gravfs or lakeFS."""
    try:
        msg = Entry.FromString(data)
    except DecodeError as e:
        raise CorruptDataError(f"entry does not parse as protobuf Entry: {e}") from None
    ts = msg.last_modified
    return EntryInfo(
        address=msg.address, size=msg.size,
        mtime_ns=ts.seconds * 1_000_000_000 + ts.nanos,
        mode=msg.mode, kind=msg.kind, symlink_target=msg.symlink_target,
        xattrs=dict(msg.xattrs), uid=msg.uid, gid=msg.gid, e_tag=msg.e_tag,
        content_type=msg.content_type, metadata=dict(msg.metadata),
        address_type=msg.address_type)


def _lp(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def entry_identity(entry: bytes | EntryInfo) -> bytes:
    """32-byte SHA-256 identity over a canonical serialization of every field.

    Accepts encoded protobuf bytes or an EntryInfo; both give the same result
    for the same entry.  Field order, lengths and map ordering are fixed here,
    so the identity never depends on the protobuf library.
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
    return hashlib.sha256(b"".join(parts)).digest()


def entry_record(key: bytes | str, info: EntryInfo) -> Record:
    """Record for ``info`` at ``key`` (str keys are UTF-8 encoded)."""
    if isinstance(key, str):
        key = key.encode()
    return Record(key, entry_identity(info), encode_entry(info))
