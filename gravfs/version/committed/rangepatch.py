"""A range with a few changes, rewritten without reading most of it.

The stitcher normally streams a changed range through the writer: every record
decoded, hashed into the range ID (or taken from the record-ID cache) and
encoded again. When a handful of changes land in a range of thousands of
records (a deletion scattered over a lake), almost all of that work
reproduces what is already stored. Here the range's SST is edited instead
(sstable.patch: only the data blocks the changes fall in are decoded), its
record IDs come from the record-ID cache with the changed ones replaced, and
its end is proved unchanged from facts its writer stored with it
(``TreeWriter._break_facts``):

- no record before the last may become a break: the old records that pass
  the hash test all sat at or below ``candidate_break_offset`` bytes, and the
  changes move any record by at most the largest growth of a prefix of them,
  so it must stay below min_size; a put (new or changed record) other than
  the last must not pass the hash test itself; and the bytes before the last
  record, grown the same way, must stay below max_size;
- the last record must still be one: not deleted, and the policy breaks after
  it at the new size.

Then a from-scratch write of the same records ends this range at the same key
with the same records, so the range ID and every later boundary are the same
as the streamed path's (tested against it). Anything else falls back to
streaming: a range without the facts (written before them, or by lakeFS), one
whose record IDs are not cached, edits of blocks SstFileWriter did not write.
"""

from __future__ import annotations

import hashlib
import logging
from itertools import accumulate

from gravfs.sstable.patch import TablePatch
from gravfs.version.committed.reader import RangeInfo, RangeStore
from gravfs.version.committed.record import decode_identity, value_record_id
from gravfs.version.committed.recordids import RECORD_ID_SIZE
from gravfs.version.committed.writer import TreeWriter

log = logging.getLogger(__name__)


def _find(blob: bytes, rid: bytes) -> int:
    """Index of record ID ``rid`` in ``blob`` (aligned), or -1."""
    at = blob.find(rid)
    while at >= 0 and at % RECORD_ID_SIZE:
        at = blob.find(rid, at + 1)
    return -1 if at < 0 else at // RECORD_ID_SIZE


def patch_range(writer: TreeWriter, rs: RangeStore, info: RangeInfo, run: list[tuple]) -> bool:
    """Append ``info``'s range with the overrides ``run`` applied (all keys <= its
    max key; the writer at a break just before it). False (nothing done) when the
    range cannot be edited in place: the caller streams it."""
    cache = rs.record_ids
    if cache is None or not run:
        return False
    opened = rs.open_range(info.id)  # held by the build below: evicting it closes the file
    reader = opened.reader
    props = reader.user_properties
    if "last_record_offset" not in props:
        return False
    blob = cache.get(info.id, info.count)
    if blob is None:
        return False
    edits = [(e[0], e[2] if e[1] is not None else None) for e in run]
    plan = TablePatch(reader, edits, (info.min_key, info.max_key))
    if not plan.ok:
        return False
    policy = writer.policy
    last_key = info.max_key
    total = int(props["estimated_size_bytes"])
    before_last = int(props["last_record_offset"])
    last_size = total - before_last
    deltas: list[int] = []
    count = info.count
    # (position in the old record IDs, replacement record IDs or b"" to delete,
    #  True to insert before the position instead of replacing)
    splices: list[tuple[int, bytes, bool]] = []
    for (key, ident, value, *_), old in zip(run, plan.old_values):
        if ident is None:
            value = None  # a delete
        if old is None and value is None:
            deltas.append(0)  # deleting what the range does not hold
            continue
        new_size = len(key) + len(value) if value is not None else 0
        old_size = len(key) + len(old) if old is not None else 0
        deltas.append(new_size - old_size)
        if key == last_key:
            if value is None:
                return False  # the range's last record goes: its end moves
            last_size = new_size
        elif value is not None and policy.hash_break(key, new_size):
            return False  # a new candidate for a break inside the range
        new_rid = b"" if value is None else value_record_id(key, ident)
        if old is not None:
            at = _find(blob, value_record_id(key, decode_identity(old)))
            if at < 0:
                return False  # the cache does not describe this range after all
            splices.append((at, new_rid, False))
            count -= value is None
        else:
            at = _insert_position(blob, plan, key)
            if at < 0:
                return False
            splices.append((at, new_rid, True))
            count += 1
    growth = max(0, max(accumulate(deltas)))
    candidate = int(props.get("candidate_break_offset", -1))
    if candidate >= 0 and candidate + growth >= policy.min_size:
        return False
    if before_last + growth >= policy.max_size:
        return False
    new_total = total + sum(deltas)
    if not (new_total >= policy.max_size
            or (new_total >= policy.min_size and policy.hash_break(last_key, last_size))):
        return False
    ids = _spliced(blob, splices)
    if len(ids) != count * RECORD_ID_SIZE:
        return False
    rid = hashlib.sha256(ids).hexdigest()
    first = plan.first_key()
    new_props = {"type": b"ranges", "min_key": first, "max_key": last_key,
                 "count": str(count).encode(), "estimated_size_bytes": str(new_total).encode(),
                 "last_record_offset": str(new_total - last_size).encode()}
    if candidate >= 0:
        new_props["candidate_break_offset"] = str(candidate + growth).encode()
    ctx = writer.ctx

    def build(path: str, opened=opened):
        return plan.write(path, new_props, ctx.compression, ctx.block_size)

    writer.add_patched(RangeInfo(rid, first, last_key, count, new_total), build, ids)
    log.debug("range %s patched into %s (%d changes)", info.id[:12], rid[:12], len(run))
    return True


def _insert_position(blob: bytes, plan: TablePatch, key: bytes) -> int:
    """Where the record ID of a key the range does not hold goes: before the record
    that follows it in its block, or after the one before it."""
    after, before = plan.neighbours(key)
    if after is not None:
        return _find(blob, value_record_id(after[0], decode_identity(after[1])))
    if before is not None:
        at = _find(blob, value_record_id(before[0], decode_identity(before[1])))
        return -1 if at < 0 else at + 1
    return -1


def _spliced(blob: bytes, splices: list[tuple[int, bytes, bool]]) -> bytes:
    parts: list[bytes] = []
    p = 0
    for at, rid, insert in sorted(splices, key=lambda s: (s[0], not s[2])):
        if at < p:
            return b""  # two edits claim one record: give up (caller falls back)
        parts.append(blob[p * RECORD_ID_SIZE:at * RECORD_ID_SIZE])
        parts.append(rid)
        p = at if insert else at + 1
    parts.append(blob[p * RECORD_ID_SIZE:])
    return b"".join(parts)
