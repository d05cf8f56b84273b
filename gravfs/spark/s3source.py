"""An S3 prefix as an import source: listed in parallel, copied or referenced.

The driver lists the prefix one level at a time (``Delimiter='/'``),
breadth first, until there are enough common prefixes for every task to
list some (``split_prefix``); executors list their prefixes in full with
ListObjectsV2 pages. The objects the driver saw on the levels it opened
travel to the executors as they are, so nothing is listed twice.

Each object becomes one entry (``entry_of_object``): by reference, its full
``s3://bucket/key`` address with size, last-modified and ETag (see
/work/notes/byref.md); in copy mode, its content is streamed into a
content-addressed data object of the repository (dedup as everywhere).
The source bucket is reached with the store's S3 settings: the endpoint of
``GRAVFS_S3_ENDPOINT``/``AWS_ENDPOINT_URL`` and the AWS credential chain.

Keys are kept as S3 lists them (UTF-8, not URL-quoted), relative to the
source prefix; keys ending in '/' (the "folder" objects of consoles) are
skipped, named in a warning and in the import's summary when one holds bytes.
"""

from __future__ import annotations

import calendar
import logging
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, NamedTuple, Optional
from urllib.parse import urlparse

from gravfs.cleanup import unlink_quiet
from gravfs.errors import GravfsError, NotFoundError, StoreUnavailableError
from gravfs.fs.ownpaths import in_s3_store, s3_store_keys
from gravfs.fs.entry import ADDRESS_FULL, KIND_FILE, EntryInfo, encode_entry, entry_identity
from gravfs.spark import leftout
from gravfs.spark.taskstore import task_store
from gravfs.spark.treejob import even_bounds
from gravfs.store.s3 import check_key_prefix
from gravfs.version.committed.record import encode_value

log = logging.getLogger(__name__)

MAX_SPLIT_DEPTH = 4   # common prefixes below this depth are listed by one task each
COPY_THREADS = 16     # per task: small objects are bound by round trips, not CPU
IN_MEMORY_MAX = 8 << 20  # objects up to this size are copied through memory
MARKER_WITH_BYTES = "a key ending in '/' (a folder marker) that holds bytes"  # not imported

_stores: dict[str, object] = {}


class S3Object(NamedTuple):
    key: str
    size: int
    etag: str      # without quotes
    mtime_ns: int


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix ending in '/' unless empty)."""
    p = urlparse(url)
    if p.scheme != "s3" or not p.netloc:
        raise GravfsError(f"{url}: not an S3 URL (expected s3://BUCKET/PREFIX)")
    prefix = p.path.lstrip("/")
    check_key_prefix(p.netloc, prefix)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return p.netloc, prefix


def source_store(bucket: str):
    """An S3Store of the whole bucket with the store's S3 settings (one per process)."""
    st = _stores.get(bucket)
    if st is None:
        from gravfs.store.s3 import S3Store

        st = _stores[bucket] = S3Store(bucket)
    return st


def _ns(dt) -> int:
    """A listing's LastModified (an aware datetime) in nanoseconds, exactly."""
    return (calendar.timegm(dt.utctimetuple()) * 1_000_000_000 + dt.microsecond * 1000)


def list_pages(bucket: str, prefix: str, delimiter: Optional[str] = None
               ) -> Iterator[tuple[list[S3Object], list[str]]]:
    """(objects, common prefixes) of each ListObjectsV2 page under ``prefix``."""
    store = source_store(bucket)
    kw = {}
    if delimiter:
        kw["Delimiter"] = delimiter
    while True:
        # the store's own call: its deadline, retries, error messages and checks
        resp = store._listed(prefix, **kw)
        objs = [S3Object(o["Key"], o["Size"], o.get("ETag", "").strip('"'),
                         _ns(o["LastModified"]))
                for o in resp.get("Contents", ())]
        yield objs, [p["Prefix"] for p in resp.get("CommonPrefixes", ())]
        token = resp.get("NextContinuationToken")
        if not resp.get("IsTruncated") or not token:
            return
        kw["ContinuationToken"] = token


def check_prefix(url: str) -> None:
    """Bad input before any Spark work: a missing bucket, or nothing under the prefix."""
    bucket, prefix = parse_s3_url(url)
    try:
        objs, dirs = next(list_pages(bucket, prefix, "/"))
    except (NotFoundError, StoreUnavailableError) as exc:  # (a missing bucket: the latter)
        raise GravfsError(f"cannot list {url}: {exc}") from None
    if not objs and not dirs:
        raise GravfsError(f"{url}: no objects under this prefix")


def store_prefixes(store_url: str, bucket: str, prefix: str) -> tuple[str, ...]:
    """The key prefixes of the repository's own S3 store inside the source
    ``s3://bucket/prefix``, which the import leaves out (as it leaves out a local store:
    gravfs.fs.ownpaths); GravfsError when the source is inside the store."""
    if in_s3_store(store_url, bucket, prefix):
        raise GravfsError(f"cannot import s3://{bucket}/{prefix}: it is in this "
                          f"repository's store ({store_url})")
    own = s3_store_keys(store_url)
    if own is None or own[0] != bucket:
        return ()
    return tuple(k for k in own[1] if k.startswith(prefix))


def _kept(objs: Iterable[S3Object], leave_out: tuple[str, ...]) -> list[S3Object]:
    return [o for o in objs if not o.key.startswith(leave_out)] if leave_out else list(objs)


def split_prefix(bucket: str, prefix: str, target: int, leave_out: tuple[str, ...] = ()
                 ) -> tuple[list[str], list[S3Object]]:
    """(prefixes for executors to list in full, objects the driver listed on the way).

    Levels are opened breadth first until there are at least ``target`` prefixes
    or MAX_SPLIT_DEPTH is reached; the prefixes ``leave_out`` names are not opened."""
    units: list[str] = []
    loose: list[S3Object] = []
    frontier = [prefix]
    depth = 0
    while frontier:
        if depth >= MAX_SPLIT_DEPTH or len(units) + len(frontier) >= target:
            units += frontier
            break
        nxt: list[str] = []
        for p in frontier:
            for objs, dirs in list_pages(bucket, p, "/"):
                loose += _kept(objs, leave_out)
                for d in dirs:
                    if d in leave_out:
                        log.warning("leaving out s3://%s/%s: it is this repository's store",
                                    bucket, d)
                    else:
                        nxt.append(d)
        frontier = nxt
        depth += 1
    log.info("split %s into %d prefixes to list (%d objects listed on the way)",
             f"s3://{bucket}/{prefix}", len(units), len(loose))
    return units, loose


def entry_of_object(bucket: str, obj: S3Object, data=None, tmp_dir: Optional[str] = None
                    ) -> EntryInfo:
    """The entry of one object: by reference when ``data`` is None, else its content
    copied into the data objects ``data`` (through a scratch file in ``tmp_dir``)."""
    if data is None:
        return EntryInfo(address=f"s3://{bucket}/{obj.key}", size=obj.size,
                         mtime_ns=obj.mtime_ns, kind=KIND_FILE, e_tag=obj.etag,
                         address_type=ADDRESS_FULL)
    if obj.size <= IN_MEMORY_MAX:  # the common small object: no scratch file
        address, size = data.put_bytes(source_store(bucket).get(obj.key))
        return EntryInfo(address=address, size=size, mtime_ns=obj.mtime_ns, kind=KIND_FILE)
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix="s3copy-")
    os.close(fd)
    try:
        source_store(bucket).download(obj.key, tmp)
        address, size = data.put_path(tmp, take=True)
    finally:
        unlink_quiet(tmp)
    return EntryInfo(address=address, size=size, mtime_ns=obj.mtime_ns, kind=KIND_FILE)


def object_records(bucket: str, strip: int, base: bytes, objs: Iterable[S3Object],
                   data=None, tmp_dir: Optional[str] = None,
                   skipped: Optional[list[str]] = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, encoded value) of objects (their keys less ``strip`` leading characters, under
    ``base``); folder markers are skipped (those holding bytes added to ``skipped``, as
    relative keys). Copies run on a thread pool."""
    def record(obj: S3Object) -> tuple[bytes, bytes]:
        e = entry_of_object(bucket, obj, data, tmp_dir)
        return base + obj.key[strip:].encode("utf-8"), encode_value(entry_identity(e),
                                                                    encode_entry(e))

    objs = (o for o in objs if not folder_marker(bucket, o, strip, skipped))
    if data is None:
        yield from map(record, objs)
        return
    with ThreadPoolExecutor(COPY_THREADS) as pool:
        yield from pool.map(record, list(objs))


def folder_marker(bucket: str, obj: S3Object, strip: int = 0,
                  skipped: Optional[list[str]] = None) -> bool:
    """Is ``obj`` a key ending in '/' (left out)? One that holds bytes is named in a
    warning and in ``skipped`` (less ``strip`` characters): a console's folder marker
    holds none, so its content would be lost unseen."""
    if not obj.key.endswith("/"):
        return False
    if obj.size:
        log.warning("s3://%s/%s: not imported: its key ends in '/' (a folder marker), yet it "
                    "holds %d bytes", bucket, obj.key, obj.size)
        if skipped is not None:
            skipped.append(obj.key[strip:])
    return True


def unit_objects(bucket: str, unit, leave_out: tuple[str, ...] = ()) -> Iterator[S3Object]:
    """The objects of a unit: a prefix to list in full (less those under ``leave_out``),
    or objects the driver listed."""
    if isinstance(unit, str):
        for objs, _ in list_pages(bucket, unit):
            yield from _kept(objs, leave_out)
    else:
        yield from (S3Object(*o) for o in unit)


class S3PrefixSource:
    """``s3://bucket/prefix`` as an import source (see the module doc)."""

    kind = "s3"
    UNITS_PER_CORE = 4
    left_out_as = MARKER_WITH_BYTES  # (gravfs.spark.leftout)

    def __init__(self, url: str):
        self.bucket, self.prefix = parse_s3_url(url)
        self.name = f"s3://{self.bucket}/{self.prefix}"
        self._split: Optional[tuple[list[str], list[S3Object]]] = None
        self.leave_out: tuple[str, ...] = ()  # the repository's own store (check_inputs)

    def check(self) -> None:
        check_prefix(self.name)

    def _units(self, sc) -> tuple[list[str], list[S3Object]]:
        if self._split is None:
            target = self.UNITS_PER_CORE * sc.defaultParallelism
            self._split = split_prefix(self.bucket, self.prefix, target, self.leave_out)
        return self._split

    def sample_bounds(self, sc, base: bytes, partitions: int) -> Optional[list[bytes]]:
        """Split keys from the common prefixes the driver listed, so the records (the
        copies, in copy mode) are made once and shuffled straight into sorted
        partitions: no sampling pass over them, nothing persisted. A prefix with more
        objects than its neighbours gives a bigger partition, never another tree."""
        prefixes, _ = self._units(sc)
        strip = len(self.prefix)
        keys = sorted({base + p[strip:].encode("utf-8") for p in prefixes if p[strip:]})
        return even_bounds(keys, partitions)

    def records(self, sc, store_url: str, base: bytes, by_reference: bool, rows, left_out):
        bucket, strip, leave_out = self.bucket, len(self.prefix), self.leave_out
        target = self.UNITS_PER_CORE * sc.defaultParallelism
        prefixes, loose = self._units(sc)
        chunk = 1000  # objects the driver listed travel in units of this many
        units: list = list(prefixes)
        units += [[tuple(o) for o in loose[i:i + chunk]] for i in range(0, len(loose), chunk)]

        def part_records(it):
            data = tmp = bulk = None
            if not by_reference:
                ts = task_store(store_url)
                (data, bulk), tmp = ts.bulk_data(), ts.data.tmp_dir
            for unit in it:
                n = 0
                skipped: list[str] = []
                for rec in object_records(bucket, strip, base,
                                          unit_objects(bucket, unit, leave_out), data, tmp,
                                          skipped):
                    n += 1
                    yield rec
                rows.add(n)
                # a unit is a prefix, or objects the driver listed (named by the first)
                leftout.note(left_out, unit if isinstance(unit, str) else ("objects", unit[0][0]),
                             skipped)
            if bulk is not None:
                bulk.publish()  # the copies are durable before the task can succeed

        return sc.parallelize(units, max(1, min(len(units), target))).mapPartitions(part_records)
