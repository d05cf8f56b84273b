"""Point lookups in the index tables with pyarrow, through the local tier.

A lookup of the keys in [lo, hi) takes the files whose span (from the
manifest) meets it, the row groups whose fences (the file's sidecar) meet it,
and reads only those row groups' columns. Sidecars and open Parquet files
are kept per reader, so a process asking many questions parses each footer
once. Index files are immutable (written once under a run's own prefix):
the tier may keep them forever. A file that cannot be read (footer,
checksum, sidecar) is fetched again once, then reported as damaged in one
line naming the file and how to rebuild.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gravfs.errors import CorruptDataError, NotFoundError
from gravfs.lru import LRU
from gravfs.provenance import manifest as manifests
from gravfs.provenance.layout import SCHEMAS, Fences, FileInfo, key_column

log = logging.getLogger(__name__)

BUILD_HINT = "build it with 'gravfs spark index'"
REBUILD_HINT = "rebuild it with 'gravfs spark index --full'"
GROUP_CACHE_BYTES = 64 << 20  # decoded row groups a reader keeps


class IndexMissingError(NotFoundError):
    """The repository has no provenance index."""


class IndexDamagedError(CorruptDataError):
    """An index file cannot be read."""


def _after(key: bytes) -> bytes:
    """The smallest key greater than ``key`` (an equality lookup is [key, _after(key)))."""
    return key + b"\x00"


def _first_line(exc: BaseException) -> str:
    """The first line of an error, printable (pyarrow quotes the damaged bytes)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return "".join(ch if ch.isprintable() else "?" for ch in line).strip()


def _check_parquet(path: str, size: int, expected: int) -> None:
    """The file has the size the manifest lists and Parquet's magic at both ends (cheap;
    the page checksums catch damage inside when pages are read)."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 4))
        tail = f.read(4)
    if size != expected or head != b"PAR1" or tail != b"PAR1":
        raise CorruptDataError(f"not the Parquet file the manifest lists ({size} bytes, "
                               f"{expected} expected)")


class IndexReader:
    """The index of one repository as its manifest lists it now."""

    def __init__(self, store, tier, manifest: Optional[manifests.Manifest] = None):
        self.store = store
        self.tier = tier
        if manifest is None:
            try:
                manifest = manifests.load(store)
            except CorruptDataError as exc:
                raise IndexDamagedError(f"provenance index manifest {manifests.MANIFEST} is "
                                        f"damaged ({exc}): {REBUILD_HINT}") from None
        if manifest is None:
            raise IndexMissingError(f"this repository has no provenance index: {BUILD_HINT}")
        self.manifest = manifest
        self._files = {t: sorted(manifest.files(t), key=lambda f: f.min) for t in SCHEMAS}
        self._fences: dict[str, Fences] = {}
        self._parquet: dict[str, pq.ParquetFile] = {}
        self.memo: dict = {}  # what queries derive from the tables (gravfs.provenance.queries)
        # decoded row groups: a reader answering many queries (a server, a notebook)
        # decodes a hot group once; the files are immutable, so nothing goes stale
        self._groups: LRU[tuple, pa.Table] = LRU(lambda t: t.nbytes)
        self.max_group_bytes = GROUP_CACHE_BYTES
        self.files_opened = 0
        self.groups_read = 0

    # -- files --------------------------------------------------------------------------

    def files(self, table: str) -> list[FileInfo]:
        return self._files[table]

    def _damaged(self, key: str, exc: BaseException) -> IndexDamagedError:
        detail = _first_line(exc)
        return IndexDamagedError(f"provenance index file {key} is damaged ({detail[:200]}): "
                                 f"{REBUILD_HINT}")

    def _retry(self, key: str, fn):
        """fn() once; on a read error drop the cached copy and try once more."""
        for attempt in (0, 1):
            try:
                return fn()
            except IndexDamagedError:  # from a nested read of the same file: said already
                raise
            except (pa.ArrowException, OSError, CorruptDataError, NotFoundError) as exc:
                if isinstance(exc, NotFoundError):
                    raise IndexDamagedError(f"provenance index file {key} is missing: "
                                            f"{REBUILD_HINT}") from None
                self._parquet.pop(key, None)
                self._fences.pop(key, None)
                self.tier.discard(key)
                if attempt:
                    raise self._damaged(key, exc) from None
                log.info("index file %s did not read (%s); fetching it again", key,
                         _first_line(exc))

    def fences(self, f: FileInfo) -> Fences:
        fe = self._fences.get(f.sidecar)
        if fe is None:
            def load() -> Fences:
                with self.tier.acquire(f.sidecar) as h:
                    return Fences.decode(h.read(), f.sidecar)
            fe = self._fences[f.sidecar] = self._retry(f.sidecar, load)
        return fe

    def _open(self, f: FileInfo) -> pq.ParquetFile:
        pf = self._parquet.get(f.key)
        if pf is None:
            def load() -> pq.ParquetFile:
                # opened while pinned; the mapping keeps the bytes of a file the tier
                # evicts later readable
                with self.tier.acquire(f.key) as h:
                    _check_parquet(h.path, h.size, f.bytes)
                    return pq.ParquetFile(h.path, memory_map=True,
                                          page_checksum_verification=True)
            pf = self._parquet[f.key] = self._retry(f.key, load)
            self.files_opened += 1
        return pf

    def _read_groups(self, f: FileInfo, groups: list[int], columns) -> pa.Table:
        cols = None if columns is None else tuple(columns)
        cache = self._groups
        got = {g: cache.get((f.key, g, cols)) for g in groups}
        missing = [g for g in groups if got[g] is None]
        if missing:
            def read() -> list[pa.Table]:
                pf = self._open(f)
                return [pf.read_row_group(g, columns=columns) for g in missing]
            for g, t in zip(missing, self._retry(f.key, read)):
                got[g] = t
                cache.put((f.key, g, cols), t)
            self.groups_read += len(missing)
            cache.evict(max_weight=self.max_group_bytes)
        return pa.concat_tables([got[g] for g in groups])

    # -- lookups ------------------------------------------------------------------------

    def scan(self, table: str, lo: bytes = b"", hi: Optional[bytes] = None,
             columns: Optional[list[str]] = None) -> pa.Table:
        """Rows with lo <= key < hi (hi None: to the end), from every file holding some."""
        keycol = key_column(table)
        cols = None if columns is None else list(dict.fromkeys([keycol, *columns]))
        parts = []
        for f in self._files[table]:
            if f.max_key < lo or (hi is not None and f.min_key >= hi):
                continue
            groups = self.fences(f).groups_between(lo, hi)
            if not groups:
                continue
            t = self._read_groups(f, groups, cols)
            k = t.column(keycol)
            mask = pc.greater_equal(k, pa.scalar(lo, pa.binary()))
            if hi is not None:
                mask = pc.and_(mask, pc.less(k, pa.scalar(hi, pa.binary())))
            parts.append(t.filter(mask))
        return self._concat(table, parts, cols)

    def get(self, table: str, key: bytes, columns: Optional[list[str]] = None) -> pa.Table:
        """Rows whose key is ``key``."""
        return self.scan(table, key, _after(key), columns)

    def get_many(self, table: str, keys: Iterable[bytes],
                 columns: Optional[list[str]] = None) -> pa.Table:
        """Rows whose key is one of ``keys``; each row group read at most once."""
        keycol = key_column(table)
        cols = None if columns is None else list(dict.fromkeys([keycol, *columns]))
        wanted = sorted(set(keys))
        parts = []
        if not wanted:
            return self._concat(table, parts, cols)
        for f in self._files[table]:
            lo_i = bisect_left(wanted, f.min_key)
            hi_i = bisect_left(wanted, _after(f.max_key))
            if lo_i >= hi_i:
                continue
            fe = self.fences(f)
            groups = set()
            for k in wanted[lo_i:hi_i]:
                groups.update(fe.groups_between(k, _after(k)))
            if not groups:
                continue
            t = self._read_groups(f, sorted(groups), cols)
            parts.append(t.filter(pc.is_in(t.column(keycol),
                                           value_set=pa.array(wanted[lo_i:hi_i], pa.binary()))))
        return self._concat(table, parts, cols)

    def read_all(self, table: str, columns: Optional[list[str]] = None) -> pa.Table:
        """Every row of a table (the small ones: commits, ranges)."""
        parts = []
        for f in self._files[table]:
            parts.append(self._retry(f.key, lambda f=f: self._open(f).read(columns=columns)))
        return self._concat(table, parts, columns)

    @staticmethod
    def _concat(table: str, parts: list[pa.Table], cols) -> pa.Table:
        schema = SCHEMAS[table]
        if cols is not None:
            schema = pa.schema([schema.field(c) for c in cols])
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(parts)


def open_index(store, tier) -> IndexReader:
    """The repository's index; IndexMissingError (with how to build it) when none."""
    return IndexReader(store, tier)


__all__ = ["IndexReader", "IndexMissingError", "IndexDamagedError", "open_index"]
