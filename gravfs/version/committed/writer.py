"""Building a tree: records in key order become range SSTs, then one metarange SST.

``TreeWriter`` accumulates records for the current range and asks the break
policy after each one whether to close it.  A closed range gets its ID from
the records alone (see record.py), is written to a temp SST and uploaded with
put-if-absent (content-addressed: an existing object is already right), in
background threads so encoding the next range overlaps writing this one.  When
the writer sits at a break, whole existing ranges can be appended by ID
without being read (``copy_range``).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from bisect import bisect_left
from itertools import accumulate, islice
from operator import add as _add, itemgetter, lt as _lt
from concurrent.futures import Executor
from typing import Iterable

from gravfs import sstable as _sstable
from gravfs.version.committed.breaks import BreakPolicy
from gravfs.version.committed.metarecords import meta_record
from gravfs.version.committed.reader import MetaRange, RangeInfo, metarange_key, range_key
from gravfs.version.committed.record import (EMPTY_ID, _LEN, _LEN_TABLE_SIZE, decode_identity,
                                     encode_value, sha256_for_short_inputs)
from gravfs.version.committed.results import Stats
from gravfs.faults import crash_point
from gravfs.store.modes import PRIVATE_FILE
from gravfs.threadmap import InOrder

log = logging.getLogger(__name__)

_sha = sha256_for_short_inputs()
_first = itemgetter(0)
_SLICE = 4096
_tmp_counter = itertools.count()
_own_start: dict[int, str] = {}  # pid -> its start time (recomputed after a fork)
# <pid>-<start>-<n>.sst, older <pid>-<n>.sst; the SST writer builds into <name>.<hex>.tmp
_TEMP_NAME = re.compile(r"^(\d+)-(?:(\d+)-)?\d+\.sst(?:\.[0-9a-f]+\.tmp)?$")
STALE_TEMP_AGE = 24 * 3600.0  # seconds; only for names without a start time


def process_start(pid: int) -> str | None:
    """Start time of process pid (clock ticks after boot, field 22 of /proc/PID/stat),
    or None when there is no such process. Together with the pid it names a
    process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()  # the command name may hold spaces
    return fields[19].decode() if len(fields) > 19 else None


def temp_sst_path(tmp_dir: str) -> str:
    """A temp SST name that says which process writes it (see remove_stale_temps)."""
    pid = os.getpid()
    start = _own_start.get(pid)
    if start is None:
        start = _own_start[pid] = process_start(pid) or "0"
    return os.path.join(tmp_dir, f"{pid}-{start}-{next(_tmp_counter)}.sst")


def _writer_alive(pid: int, start: str | None) -> bool:
    if start and start != "0":
        return process_start(pid) == start
    try:  # no start time recorded: the pid alone (it may have been reused)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(tmp_dir: str, max_age: float = STALE_TEMP_AGE) -> int:
    """Delete temp SSTs left by writers that died (a commit killed mid-write).

    A file is removed when the process named in it is gone (pid and start time
    both checked, so a reused pid does not keep it). Names without a start time
    (older gravfs, or no /proc) are also removed past ``max_age`` seconds, long
    after any writer finished with them. Files of live writers and names
    gravfs does not write are left alone. Returns how many were removed.
    """
    try:
        names = os.listdir(tmp_dir)
    except FileNotFoundError:
        return 0
    removed = 0
    now = time.time()
    for name in names:
        m = _TEMP_NAME.match(name)
        if m is None:
            continue
        path = os.path.join(tmp_dir, name)
        if _writer_alive(int(m.group(1)), m.group(2)):
            if m.group(2) and m.group(2) != "0":
                continue
            try:
                if now - os.stat(path).st_mtime < max_age:
                    continue
            except FileNotFoundError:
                continue
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    if removed:
        log.info("removed %d temporary SST file(s) of dead writers from %s", removed, tmp_dir)
    return removed


class WriteContext:
    """Where and how a manager writes SSTs (shared by all its TreeWriters)."""

    def __init__(self, store, tmp_dir: str, executor: Executor | None,
                 compression: str = "snappy", block_size: int = 4096, max_inflight: int = 4):
        self.store = store
        self.tmp_dir = tmp_dir
        self.executor = executor
        self.compression = compression
        self.block_size = block_size
        self.max_inflight = max_inflight
        self.record_ids = None  # a RecordIDs to file the record IDs of written ranges in
        self.tier = None  # a LocalTier that keeps written ranges (add_written), if any
        # a worker's: what add_written linked, reported to its driver (run_slice)
        self.linked: list[tuple[str, int, int]] | None = None

    def write_sst(self, store_key: str, keys: list[bytes], values: list[bytes],
                  properties: dict[str, bytes]) -> tuple[int, bool]:
        """Write one SST and upload it if absent; returns (size, created).

        The file is handed to the store as it is (LocalStore links it into
        place, so the bytes are written and synced once).
        """
        return self.put_built(store_key, lambda path: _sstable.write_sst(
            path, zip(keys, values), properties, compression=self.compression,
            block_size=self.block_size))

    def put_range(self, range_id: str, what, record_ids: bytes | None) -> tuple[int, bool]:
        """Range ``range_id``: write_sst(*what), or put_built(what) for a callable; then
        file its record IDs in the cache (run off the stitcher's thread)."""
        if callable(what):
            out = self.put_built(range_key(range_id), what)
        else:
            out = self.write_sst(range_key(range_id), *what)
        if record_ids is not None and self.record_ids is not None:
            self.record_ids.put(range_id, record_ids)
        return out

    def put_built(self, store_key: str, build) -> tuple[int, bool]:
        """``build(path)`` writes an SST (returning its SSTInfo); upload it if absent,
        keep it in the tier; returns (size, created)."""
        path = temp_sst_path(self.tmp_dir)
        try:
            info = build(path)
            os.chmod(path, PRIVATE_FILE)  # may become the tier's copy (a store sets its own mode)
            crash_point("sst:written")
            created = self.store.put_file_if_absent(store_key, path)
            if self.tier is not None:
                linked = self.tier.add_written(store_key, path)
                if linked is not None and self.linked is not None:
                    self.linked.append(linked)
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        return info.size, created


class TreeWriter:
    """Accumulates a new tree; see module docstring.

    ``known`` holds range IDs already stored (e.g. the base tree's): a range
    rebuilt with one of those IDs is not written again.
    """

    def __init__(self, ctx: WriteContext, policy: BreakPolicy, stats: Stats,
                 known: set[str] | None = None):
        self.ctx = ctx
        self.policy = policy
        self.stats = stats
        self.known = known if known is not None else set()
        self._slice = 256
        self.out: list[RangeInfo] = []
        self._uploads: InOrder[tuple[int, int, bool]] | None = (
            None if ctx.executor is None else InOrder(ctx.executor, ctx.max_inflight))
        self._done: list[tuple[int, int, bool]] = []
        self._reset()
        self._last_key: bytes | None = None

    def _reset(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self._h = _sha()
        self._blobs: list[bytes] = []  # the record IDs hashed into _h, for the record-ID cache
        self.size = 0

    @property
    def empty(self) -> bool:
        """True when no record is pending: the writer sits at a range break."""
        return not self.keys

    @property
    def last_key(self) -> bytes | None:
        return self.keys[-1] if self.keys else (self.out[-1].max_key if self.out else None)

    # --- adding ------------------------------------------------------------
    #
    # Records are handled in slices with list comprehensions and bisection
    # over cumulative sizes instead of one Python-level step per record: the
    # only per-record loop left is the policy's hash test, and it stops at
    # the first break.

    def take(self, keys: list[bytes], values: list[bytes], start: int, end: int,
             idents: list[bytes] | None = None,
             record_ids: list[bytes | None] | None = None) -> tuple[int, bool]:
        """Append keys[start:j] / values[start:j] (encoded) up to the first break.

        Returns (j, broke): j == end when no break happened before ``end``;
        otherwise the range closed after record j-1.  ``idents`` (same
        indexing) saves decoding identities when the caller has them;
        ``record_ids`` (same indexing, None where unknown) the hashing of
        records whose valueRecordIDs are known (recordids.py).
        """
        policy = self.policy
        mn, mx = policy.min_size, policy.max_size
        while start < end:
            stop = min(end, start + self._slice)
            ks = keys[start:stop]
            vs = values[start:stop]
            sizes = list(map(_add, map(len, ks), map(len, vs)))
            cum = list(accumulate(sizes, initial=self.size))
            m = len(ks)
            i_min = bisect_left(cum, mn, 1) - 1
            i_max = bisect_left(cum, mx, 1) - 1
            brk = m
            if i_min < m:
                brk = policy.first_hash_break(ks, sizes, i_min, min(i_max, m))
                if brk >= m and i_max < m:
                    brk = i_max
            n = m if brk >= m else brk + 1
            if n < m:
                ks, vs = ks[:n], vs[:n]
            if record_ids is not None:
                digests = record_ids[start:start + n]
                if None in digests:
                    digests = [d if d is not None else _sha(_sha(k).digest() + _sha(
                        v[1:33] if v[0] == 64 else decode_identity(v)).digest()).digest()
                        for d, k, v in zip(digests, ks, vs)]
            elif idents is not None:
                ids = idents[start:start + n]
                digests = [_sha(_sha(k).digest() + _sha(i).digest()).digest()
                           for k, i in zip(ks, ids)]
            elif bytes(map(_first, vs)).count(64) == len(vs):
                # every identity is 32 bytes (gravfs's and lakeFS's): slice it in place
                digests = [_sha(_sha(k).digest() + _sha(v[1:33]).digest()).digest()
                           for k, v in zip(ks, vs)]
            else:
                ids = [v[1:1 + (v[0] >> 1)] if v[0] < 0x80 and not v[0] & 1
                       else decode_identity(v) for v in vs]
                digests = [_sha(_sha(k).digest() + _sha(i).digest()).digest()
                           for k, i in zip(ks, ids)]
            blob = b"".join(digests)
            self._h.update(blob)
            self._blobs.append(blob)
            self.keys += ks
            self.values += vs
            self.size = cum[n]
            start += n
            if n < m or brk < m:
                self.flush()
                return start, True
        return start, False

    def add(self, key: bytes, identity: bytes, value: bytes) -> bool:
        """Append one record (value already encoded); True if a range closed after it."""
        return self.take([key], [value], 0, 1, [identity])[1]

    def add_records(self, records: Iterable) -> None:
        """Bulk path for (key, identity, data) records in strictly ascending key order."""
        it = iter(records)
        table, tsize = _LEN, _LEN_TABLE_SIZE
        while True:
            chunk = list(islice(it, _SLICE))
            if not chunk:
                return
            ks = [r[0] for r in chunk]
            ids = [r[1] for r in chunk]
            ds = [r[2] for r in chunk]
            last = self.last_key
            if (last is not None and ks[0] <= last) or not all(map(_lt, ks, islice(ks, 1, None))):
                bad = next(k for p, k in zip([last] + ks, ks) if p is not None and k <= p)
                raise ValueError(f"records not in strictly ascending key order at {bad!r}")
            if max(map(len, ds)) < tsize and max(map(len, ids)) < tsize:
                vs = [table[len(i)] + i + table[len(d)] + d for i, d in zip(ids, ds)]
            else:
                vs = [encode_value(i, d) for i, d in zip(ids, ds)]
            pos = 0
            while pos < len(ks):
                pos, _ = self.take(ks, vs, pos, len(ks), ids)

    def copy_range(self, info: RangeInfo) -> None:
        """Append an existing range by ID; only legal at a break."""
        assert not self.keys, "copy_range needs the writer at a range break"
        self.out.append(info)
        self.stats.ranges_reused += 1

    def copy_ranges(self, infos: list[RangeInfo]) -> None:
        """Append consecutive existing ranges by ID; only legal at a break."""
        assert not self.keys, "copy_ranges needs the writer at a range break"
        self.out += infos
        self.stats.ranges_reused += len(infos)

    def adopt_ranges(self, infos: list[RangeInfo]) -> None:
        """Append ranges another writer wrote (already counted in its stats); at a break."""
        assert not self.keys, "adopt_ranges needs the writer at a range break"
        self.out += infos

    # --- closing -----------------------------------------------------------

    def flush(self) -> None:
        """Close the pending range (if any) and schedule its upload."""
        keys = self.keys
        if not keys:
            return
        rid = self._h.hexdigest()
        info = RangeInfo(rid, keys[0], keys[-1], len(keys), self.size)
        # Slices a bit longer than a typical range: little wasted work past a break.
        self._slice = max(32, min(_SLICE, 2 * len(keys)))
        idx = len(self.out)
        self.out.append(info)
        if rid in self.known:
            self.stats.ranges_reused += 1
        else:
            self.known.add(rid)
            self.stats.ranges_written += 1
            self.stats.records_written += len(keys)
            props = {"type": b"ranges", "min_key": keys[0], "max_key": keys[-1],
                     "count": str(len(keys)).encode(),
                     "estimated_size_bytes": str(self.size).encode(), **self._break_facts()}
            blob = b"".join(self._blobs) if self.ctx.record_ids is not None else None
            self._submit(idx, rid, (keys, self.values, props), blob)
        self._reset()

    def _break_facts(self) -> dict[str, bytes]:
        """What lets a later edit of this range keep its end without reading it
        (rangepatch.py): the logical bytes before its last record, and the most
        logical bytes at a record before the last that passes the policy's hash
        test (all such lie below min_size, or the range would have ended there)."""
        keys, values, policy = self.keys, self.values, self.policy
        last_size = len(keys[-1]) + len(values[-1])
        facts = {"last_record_offset": str(self.size - last_size).encode()}
        if policy.min_size <= 0:
            return facts  # every hit would have ended the range
        sizes = list(map(_add, map(len, keys), map(len, values)))
        cum = list(accumulate(sizes))
        # hits at or past min_size before the last record would have ended the range;
        # the search covers them anyway (a forced break), which only makes the fact safer
        end = min(bisect_left(cum, policy.min_size) + 1, len(keys) - 1)
        hit = -1
        i = policy.first_hash_break(keys, sizes, 0, end)
        while i < end:
            hit = i
            i = policy.first_hash_break(keys, sizes, i + 1, end)
        if hit >= 0:
            facts["candidate_break_offset"] = str(cum[hit]).encode()
        return facts

    def add_patched(self, info: RangeInfo, build, record_ids: bytes) -> None:
        """Append a range made by editing an existing one (rangepatch.py); at a break.
        ``build(path)`` writes its SST, in the background like any range."""
        assert not self.keys, "add_patched needs the writer at a range break"
        idx = len(self.out)
        self.out.append(info)
        if info.id in self.known:
            self.stats.ranges_reused += 1
            return
        self.known.add(info.id)
        self.stats.ranges_written += 1
        self.stats.ranges_patched += 1
        self.stats.records_written += info.count
        self._submit(idx, info.id, build, record_ids)

    def _submit(self, idx: int, range_id: str, what, record_ids: bytes | None) -> None:
        """Write range ``range_id`` in the background (WriteContext.put_range); once
        one upload failed, the queued ones do not start (threadmap.InOrder)."""
        if self._uploads is None:
            self._done.append(self._put(idx, range_id, what, record_ids))
        else:
            self._done += self._uploads.push(self._put, idx, range_id, what, record_ids)

    def _put(self, idx: int, range_id: str, what,
             record_ids: bytes | None) -> tuple[int, int, bool]:
        return (idx, *self.ctx.put_range(range_id, what, record_ids))

    def _drain(self) -> None:
        if self._uploads is not None:
            self._done += self._uploads.drain()
        for i, size, created in self._done:
            self.out[i] = self.out[i]._replace(estimated_size=size)
            if created:
                self.stats.bytes_written += size
        self._done.clear()

    def close_ranges(self) -> list[RangeInfo]:
        """Close the last range and wait for the uploads; the ranges, no metarange."""
        try:
            self.flush()
            self._drain()
        except BaseException:
            self.abort()
            raise
        return self.out

    def abort(self) -> None:
        """After a failure: start no queued upload, wait for the running ones."""
        if self._uploads is not None:
            self._uploads.cancel(wait=True)

    def finish(self, base: MetaRange | None = None) -> MetaRange:
        """Close the last range, wait for uploads, write the metarange; returns it.

        If the ranges are exactly ``base``'s, ``base`` is returned and nothing
        is written (a no-op change set).
        """
        ranges = self.close_ranges()
        if not ranges:
            return MetaRange(EMPTY_ID, [])
        if base is not None and len(base.ids) == len(ranges) and \
                base.ids == [r.id for r in ranges]:
            return base
        recs = [meta_record(r) for r in ranges]  # cached for copied ranges
        keys = [r.max_key for r in ranges]
        values = [e[0] for e in recs]
        h = _sha(b"".join([e[1] for e in recs]))
        mid = h.hexdigest()
        logical = sum(map(len, keys)) + sum(map(len, values))
        props = {"type": b"metaranges", "min_key": keys[0], "max_key": keys[-1],
                 "count": str(len(keys)).encode(), "estimated_size_bytes": str(logical).encode()}
        size, created = self.ctx.write_sst(metarange_key(mid), keys, values, props)
        self.stats.metaranges_written += 1
        if created:
            self.stats.bytes_written += size
        return MetaRange(mid, list(ranges))
