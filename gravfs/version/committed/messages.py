"""Protobuf messages stored in SST values, built at runtime (no protoc needed).

``RangeData`` is lakeFS's metarange payload; ``Entry`` is lakeFS's catalog entry
(fields 1-7, same numbers and wire types) extended with filesystem fields
numbered from 20 up, which lakeFS parsers skip as unknown fields.  The
descriptors live in a private pool so they cannot clash with any other
module's registrations.

Equivalent .proto (package gravfs.committed, proto3)::

    message RangeData { bytes min_key = 1; bytes max_key = 2;
                        uint64 estimated_size = 3; int64 count = 4; }
    message Entry {
      enum AddressType { BY_PREFIX_DEPRECATED = 0; RELATIVE = 1; FULL = 2; }
      enum Kind { FILE = 0; DIRECTORY = 1; SYMLINK = 2;
                  FIFO = 3; SOCKET = 4; CHAR_DEVICE = 5; BLOCK_DEVICE = 6; }
      string address = 1; google.protobuf.Timestamp last_modified = 2;
      int64 size = 3; string e_tag = 4; map<string, string> metadata = 5;
      AddressType address_type = 6; string content_type = 7;
      uint32 mode = 20;            // full st_mode, file-type bits included
      Kind kind = 21; string symlink_target = 22;
      map<string, bytes> xattrs = 23;
      uint32 uid = 24; uint32 gid = 25;
      uint64 rdev = 26;            // device number of CHAR_DEVICE/BLOCK_DEVICE
      google.protobuf.Timestamp atime = 27; google.protobuf.Timestamp ctime = 28;
      string link_group = 29;      // hard links: the names of one inode share it
      repeated bytes links = 30;   // every key of the group (sorted), this one included
    }
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
from google.protobuf.message_factory import GetMessageClass

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_PACKAGE = "gravfs.committed"


def _field(msg, name, number, ftype, label=_OPT, type_name=None):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    return f


def _map_field(msg, name, number, entry_name, value_type):
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, value_type)
    _field(msg, name, number, _F.TYPE_MESSAGE, _REP,
           f".{_PACKAGE}.{msg.name}.{entry_name}")


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool.Add(ts)

    fd = descriptor_pb2.FileDescriptorProto(
        name="gravfs/committed/committed.proto", package=_PACKAGE, syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])

    rd = fd.message_type.add(name="RangeData")
    _field(rd, "min_key", 1, _F.TYPE_BYTES)
    _field(rd, "max_key", 2, _F.TYPE_BYTES)
    _field(rd, "estimated_size", 3, _F.TYPE_UINT64)
    _field(rd, "count", 4, _F.TYPE_INT64)

    en = fd.message_type.add(name="Entry")
    at = en.enum_type.add(name="AddressType")
    for i, n in enumerate(("BY_PREFIX_DEPRECATED", "RELATIVE", "FULL")):
        at.value.add(name=n, number=i)
    kd = en.enum_type.add(name="Kind")
    for i, n in enumerate(("FILE", "DIRECTORY", "SYMLINK", "FIFO", "SOCKET", "CHAR_DEVICE",
                           "BLOCK_DEVICE")):
        kd.value.add(name=n, number=i)
    _field(en, "address", 1, _F.TYPE_STRING)
    _field(en, "last_modified", 2, _F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    _field(en, "size", 3, _F.TYPE_INT64)
    _field(en, "e_tag", 4, _F.TYPE_STRING)
    _map_field(en, "metadata", 5, "MetadataEntry", _F.TYPE_STRING)
    _field(en, "address_type", 6, _F.TYPE_ENUM, type_name=f".{_PACKAGE}.Entry.AddressType")
    _field(en, "content_type", 7, _F.TYPE_STRING)
    _field(en, "mode", 20, _F.TYPE_UINT32)
    _field(en, "kind", 21, _F.TYPE_ENUM, type_name=f".{_PACKAGE}.Entry.Kind")
    _field(en, "symlink_target", 22, _F.TYPE_STRING)
    _map_field(en, "xattrs", 23, "XattrsEntry", _F.TYPE_BYTES)
    _field(en, "uid", 24, _F.TYPE_UINT32)
    _field(en, "gid", 25, _F.TYPE_UINT32)
    _field(en, "rdev", 26, _F.TYPE_UINT64)
    _field(en, "atime", 27, _F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    _field(en, "ctime", 28, _F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    _field(en, "link_group", 29, _F.TYPE_STRING)
    _field(en, "links", 30, _F.TYPE_BYTES, _REP)

    pool.Add(fd)
    return pool


_POOL = _build_pool()
RangeData = GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.RangeData"))
Entry = GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.Entry"))
Timestamp = GetMessageClass(_POOL.FindMessageTypeByName("google.protobuf.Timestamp"))


def encode_range_data(min_key: bytes, max_key: bytes, estimated_size: int, count: int) -> bytes:
    return RangeData(min_key=min_key, max_key=max_key, estimated_size=estimated_size,
                     count=count).SerializeToString()
