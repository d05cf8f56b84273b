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

import hashlib
import itertools
import logging
import os
from collections import deque
from concurrent.futures import Executor, Future
from typing import Iterable

import xxhash

from gravfs import sstable as _sstable
from gravfs.committed.breaks import BreakPolicy
from gravfs.committed.messages import encode_range_data
from gravfs.committed.reader import MetaRange, RangeInfo, metarange_key, range_key
from gravfs.committed.record import EMPTY_ID, _enc_len, decode_identity, encode_value
from gravfs.committed.results import Stats

log = logging.getLogger(__name__)

_sha = hashlib.sha256
_x64 = xxhash.xxh3_64_intdigest
_tmp_counter = itertools.count()


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

    def write_sst(self, store_key: str, keys: list[bytes], values: list[bytes],
                  properties: dict[str, bytes]) -> tuple[int, bool]:
        """Write one SST and upload it if absent; returns (size, created)."""
        path = os.path.join(self.tmp_dir, f"{os.getpid()}-{next(_tmp_counter)}.sst")
        try:
            _sstable.write_sst(path, zip(keys, values), properties,
                               compression=self.compression, block_size=self.block_size)
            with open(path, "rb") as f:
                data = f.read()
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        created = self.store.put_if_absent(store_key, data)
        return len(data), created


class TreeWriter:
    """Accumulates a new tree; see module docstring.

    ``known`` holds range IDs already stored (e.g. the base tree's): a range
    rebuilt with one of those IDs is not written again.  With ``dry`` set no
    object is written at all (used once a merge has found a conflict).
    """

    def __init__(self, ctx: WriteContext, policy: BreakPolicy, stats: Stats,
                 known: set[str] | None = None):
        self.ctx = ctx
        self.policy = policy
        self.stats = stats
        self.known = known if known is not None else set()
        self.dry = False
        self.out: list[RangeInfo] = []
        self._futures: deque[tuple[int, Future]] = deque()
        self._done: list[tuple[int, int, bool]] = []
        self._reset()
        self._last_key: bytes | None = None

    def _reset(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self._h = _sha()
        self.size = 0

    @property
    def empty(self) -> bool:
        """True when no record is pending: the writer sits at a range break."""
        return not self.keys

    @property
    def last_key(self) -> bytes | None:
        return self.keys[-1] if self.keys else (self.out[-1].max_key if self.out else None)

    # --- adding ------------------------------------------------------------

    def add(self, key: bytes, identity: bytes, value: bytes) -> bool:
        """Append one record (value already encoded); True if a range closed after it."""
        self.keys.append(key)
        self.values.append(value)
        self._h.update(_sha(_sha(key).digest() + _sha(identity).digest()).digest())
        rs = len(key) + len(value)
        self.size += rs
        if self.policy.should_break(key, rs, self.size):
            self.flush()
            return True
        return False

    def feed(self, cur: tuple[bytes, bytes], items, limit: bytes | None):
        """Append ``cur`` and the following raw (key, value) pairs from ``items``.

        Stops before a key >= ``limit`` (None: no bound), right after a range
        break, or when ``items`` ends.  Returns (next pair or None, broke,
        last key added).  This is the hot loop of rewriting a range.
        """
        policy = self.policy
        inline = type(policy) is BreakPolicy
        mn, mx, rg, seed = policy.min_size, policy.max_size, policy.raggedness, policy.seed
        should_break = policy.should_break
        sha = _sha
        keys, values = self.keys, self.values
        kapp, vapp = keys.append, values.append
        upd = self._h.update
        size = self.size
        key = None
        while cur is not None:
            key, value = cur
            if limit is not None and key >= limit:
                self.size = size
                return cur, False, keys[-1] if keys else None
            b = value[0] if value else 0x80
            if b < 0x80 and not b & 1 and len(value) > (b >> 1):
                identity = value[1:1 + (b >> 1)]
            else:
                identity = decode_identity(value)
            kapp(key)
            vapp(value)
            upd(sha(sha(key).digest() + sha(identity).digest()).digest())
            rs = len(key) + len(value)
            size += rs
            cur = next(items, None)
            if size >= mn and (
                    (size >= mx or _x64(key, seed) % rg == 0) if inline
                    else should_break(key, rs, size)):
                self.size = size
                self.flush()
                return cur, True, key
        self.size = size
        return None, False, key

    def add_items(self, items) -> None:
        """Append raw (key, encoded value) pairs, e.g. read from a range."""
        items = iter(items)
        cur = next(items, None)
        while cur is not None:
            cur, _, _ = self.feed(cur, items, None)

    def add_records(self, records: Iterable) -> None:
        """Bulk path for (key, identity, data) records in strictly ascending key order."""
        policy = self.policy
        inline = type(policy) is BreakPolicy
        mn, mx, rg, seed = policy.min_size, policy.max_size, policy.raggedness, policy.seed
        x64 = _x64
        should_break = policy.should_break
        sha = _sha
        enc = _enc_len
        last = self.last_key
        keys, values = self.keys, self.values
        h = self._h
        size = self.size
        for key, identity, data in records:
            if last is not None and key <= last:
                self.size = size
                raise ValueError(f"records not in strictly ascending key order at {key!r}")
            last = key
            li, ld = len(identity), len(data)
            if li < 64 and ld < 64:
                value = bytes((li << 1,)) + identity + bytes((ld << 1,)) + data
            else:
                value = enc(li) + identity + enc(ld) + data
            keys.append(key)
            values.append(value)
            h.update(sha(sha(key).digest() + sha(identity).digest()).digest())
            rs = len(key) + len(value)
            size += rs
            if size >= mn and (
                    (size >= mx or x64(key, seed) % rg == 0) if inline
                    else should_break(key, rs, size)):
                self.size = size
                self.flush()
                keys, values, h, size = self.keys, self.values, self._h, 0
        self.size = size

    def copy_range(self, info: RangeInfo) -> None:
        """Append an existing range by ID; only legal at a break."""
        assert not self.keys, "copy_range needs the writer at a range break"
        self.out.append(info)
        self.stats.ranges_reused += 1

    # --- closing -----------------------------------------------------------

    def flush(self) -> None:
        """Close the pending range (if any) and schedule its upload."""
        keys = self.keys
        if not keys:
            return
        rid = self._h.hexdigest()
        info = RangeInfo(rid, keys[0], keys[-1], len(keys), self.size)
        idx = len(self.out)
        self.out.append(info)
        if rid in self.known:
            self.stats.ranges_reused += 1
        elif not self.dry:
            self.known.add(rid)
            self.stats.ranges_written += 1
            self.stats.records_written += len(keys)
            props = {"type": b"ranges", "min_key": keys[0], "max_key": keys[-1],
                     "count": str(len(keys)).encode(),
                     "estimated_size_bytes": str(self.size).encode()}
            self._submit(idx, range_key(rid), keys, self.values, props)
        self._reset()

    def _submit(self, idx: int, store_key: str, keys, values, props) -> None:
        ctx = self.ctx
        if ctx.executor is None:
            size, created = ctx.write_sst(store_key, keys, values, props)
            self._done.append((idx, size, created))
            return
        while len(self._futures) >= ctx.max_inflight:
            i, fut = self._futures.popleft()
            self._done.append((i, *fut.result()))
        self._futures.append((idx, ctx.executor.submit(ctx.write_sst, store_key, keys, values, props)))

    def _drain(self) -> None:
        while self._futures:
            i, fut = self._futures.popleft()
            self._done.append((i, *fut.result()))
        for i, size, created in self._done:
            self.out[i] = self.out[i]._replace(estimated_size=size)
            if created:
                self.stats.bytes_written += size
        self._done.clear()

    def abort(self) -> None:
        """Wait for background uploads (errors ignored) after a failure."""
        while self._futures:
            _, fut = self._futures.popleft()
            try:
                fut.result()
            except Exception:
                pass

    def finish(self, base: MetaRange | None = None) -> MetaRange:
        """Close the last range, wait for uploads, write the metarange; returns it.

        If the ranges are exactly ``base``'s, ``base`` is returned and nothing
        is written (a no-op change set).
        """
        try:
            self.flush()
            self._drain()
        except BaseException:
            self.abort()
            raise
        ranges = self.out
        if not ranges:
            return MetaRange(EMPTY_ID, [])
        if base is not None and len(base.ids) == len(ranges) and \
                all(a == b.id for a, b in zip(base.ids, ranges)):
            return base
        h = _sha()
        keys, values = [], []
        for r in ranges:
            ident = r.id.encode("ascii")
            h.update(_sha(_sha(r.max_key).digest() + _sha(ident).digest()).digest())
            keys.append(r.max_key)
            values.append(encode_value(ident, encode_range_data(
                r.min_key, r.max_key, r.estimated_size, r.count)))
        mid = h.hexdigest()
        if not self.dry:
            props = {"type": b"metaranges", "min_key": keys[0], "max_key": keys[-1],
                     "count": str(len(keys)).encode(),
                     "estimated_size_bytes": str(sum(len(k) + len(v) for k, v in zip(keys, values))).encode()}
            size, created = self.ctx.write_sst(metarange_key(mid), keys, values, props)
            self.stats.metaranges_written += 1
            if created:
                self.stats.bytes_written += size
        return MetaRange(mid, list(ranges))
