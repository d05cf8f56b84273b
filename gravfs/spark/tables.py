"""A commit's entries as a DataFrame: one row per entry, ranges read by the tasks.

The driver reads only the metarange (the list of ranges); each task opens the
store itself and reads its range with gravfs's own SST reader (through the
task's local tier), decoding the entries into Arrow batches (``mapInArrow``,
no per-row pickling). Paths are shown as ``gravfs ls`` shows them: foreign
names escaped (gravfs.fs.paths.escape_key), quoted as git quotes them, a
directory marker with its trailing '/'; ``key`` keeps the exact bytes.

A task reads up to RANGES_PER_TASK ranges (fewer when that leaves fewer than
four tasks per core): a Spark task costs about 0.2 s of its own, as much as
reading a range, so one task per range ran at half the rate (1M entries on
local[2]: 24.7k entries/s one range per task, 41.8k with 8, 47.4k with 32).
"""

from __future__ import annotations

import logging
import os
import re
import time
from itertools import islice
from typing import Iterator, Optional

from gravfs.errors import GravfsError
from gravfs.fs.entry import (ADDRESS_BY_PREFIX_DEPRECATED, ADDRESS_FULL, ADDRESS_RELATIVE,
                             decode_entry)
from gravfs.fs.ownpaths import owner_of
from gravfs.fs.paths import MAX_NAME_BYTES, show
from gravfs.fs.repository import KIND_NAMES, Repository
from gravfs.spark.taskstore import task_store
from gravfs.version.committed.reader import MetaRange, RangeStore
from gravfs.version.committed.record import decode_value

log = logging.getLogger(__name__)

ADDRESS_KINDS = {ADDRESS_RELATIVE: "relative", ADDRESS_FULL: "full",
                 ADDRESS_BY_PREFIX_DEPRECATED: "by_prefix"}

# The columns of entries(), with their Spark types. The tasks make every column but
# mtime, which Spark derives from mtime_ns (MTIME), so rows carry plain Python values.
ENTRY_COLUMNS = [("path", "string"), ("key", "binary"), ("kind", "string"),
                 ("address", "string"), ("address_kind", "string"), ("size", "long"),
                 ("mtime", "timestamp"), ("mtime_ns", "long"), ("mode", "int"),
                 ("symlink_target", "string"), ("e_tag", "string"), ("identity", "string"),
                 ("range_id", "string")]
ROW_COLUMNS = [c for c in ENTRY_COLUMNS if c[0] != "mtime"]
MTIME = "timestamp_micros(div({}, 1000))"  # SQL: a timestamp of a column of nanoseconds
BATCH_ROWS = 8192
RANGES_PER_TASK = 32

_ranges: dict[str, RangeStore] = {}


def task_ranges(store_url: str) -> RangeStore:
    """This worker process's range reader of a store (through its TaskStore's tier)."""
    rs = _ranges.get(store_url)
    if rs is None:
        rs = _ranges[store_url] = RangeStore(task_store(store_url).tier)
    return rs


# a key of printable ASCII names (no '"', '\\', '/' inside a name) is shown as it is
# unless a name is '.' or '..' or too long: shown_path's fast path
_PLAIN = re.compile(rb"[ !#-.0-\[\]-~]+(?:/[ !#-.0-\[\]-~]+)*")


def shown_path(key: bytes, directory: bool) -> str:
    """``show(key, directory)`` (the path as gravfs ls shows it), without its per-character
    work for the common key."""
    body = key[:-1] if directory and key.endswith(b"/") else key
    if (_PLAIN.fullmatch(body) and b"." not in body[:1] and b"/." not in body
            and (len(body) <= MAX_NAME_BYTES or
                 max(len(n) for n in body.split(b"/")) <= MAX_NAME_BYTES)):
        return key.decode("ascii")
    return show(key, directory=directory)


def entry_row(key: bytes, value: bytes, range_id: Optional[str]) -> tuple:
    """The row of one record (ROW_COLUMNS, in order)."""
    identity, data = decode_value(value)
    e = decode_entry(data)
    kind = KIND_NAMES.get(e.kind, "file")
    return (shown_path(key, kind == "dir"), key, kind, e.address or None,
            ADDRESS_KINDS.get(e.address_type, str(e.address_type)), e.size, e.mtime_ns,
            e.mode, e.symlink_target if kind == "symlink" else None, e.e_tag or None,
            identity.hex(), range_id)


def range_rows(store_url: str, range_id: str) -> Iterator[tuple]:
    """Rows of every entry of one range (runs on an executor)."""
    for k, v in task_ranges(store_url).range_items(range_id, fill_cache=False):
        yield entry_row(k, v, range_id)


def spark_schema(columns: list):
    """A Spark StructType of (name, type) pairs; a type is a type name or a nested list."""
    from pyspark.sql import types as T
    names = {"string": T.StringType, "binary": T.BinaryType, "long": T.LongType,
             "int": T.IntegerType, "timestamp": T.TimestampType, "boolean": T.BooleanType}
    return T.StructType([
        T.StructField(n, spark_schema(t) if isinstance(t, list) else names[t]())
        for n, t in columns])


def open_repo(store, state_dir: Optional[str] = None):
    """(Repository, whether the caller must close it) for a Repository or a store URL."""
    if isinstance(store, str):
        return Repository.open(store, state_dir), True
    return store, False


def tree_of(repo, ref: str) -> tuple[str, MetaRange]:
    """(commit id, metarange) of a ref (NotFoundError for a missing one)."""
    commit = repo.resolve(ref).commit
    return commit.id, repo.committed.metarange(commit.metarange)


def entries(spark, store, ref: str, state_dir: Optional[str] = None):
    """A DataFrame of every entry of ``ref`` (columns: ENTRY_COLUMNS), a few ranges per task.

    ``store``: a Repository or a store URL (opened with ``state_dir``). Executors
    open the store from its URL, so it must name the same store for them (S3,
    or a path every worker sees). The DataFrame is lazy: its tasks read the
    ranges when an action runs.
    """
    repo, own = open_repo(store, state_dir)
    try:
        cid, mr = tree_of(repo, ref)
        url = repo.store.url
    finally:
        if own:
            repo.close()
    ids = list(mr.ids)
    log.info("entries of %s (commit %s): %d ranges, %d entries", ref, cid[:12], len(ids),
             mr.count)
    return ranges_frame(spark, url, ids)


def ranges_frame(spark, store_url: str, range_ids: list[str]):
    """The entries of the given ranges as a DataFrame, a few ranges per task (see the
    module docstring; each task's rows go to Spark as Arrow batches: no per-row
    conversion)."""
    schema = spark_schema(ENTRY_COLUMNS)
    if not range_ids:
        return spark.createDataFrame([], schema)
    arrow = arrow_schema(schema)
    ids = spark.createDataFrame(
        spark.sparkContext.parallelize(
            [(r,) for r in range_ids],
            task_count(len(range_ids), spark.sparkContext.defaultParallelism)),
        spark_schema([("range_id", "string")]))

    def read(batches):
        for b in batches:
            for rid in b.column(0).to_pylist():
                yield from arrow_batches(range_rows(store_url, rid), arrow)

    return ids.mapInArrow(read, schema)


def task_count(ranges: int, cores: int) -> int:
    """Tasks for reading ``ranges`` ranges: at most RANGES_PER_TASK ranges each, and
    at least four tasks per core where there are enough ranges (even finishing)."""
    return max(min(ranges, 4 * max(1, cores)), -(-ranges // RANGES_PER_TASK), 1)


def arrow_schema(schema):
    """The pyarrow schema Spark expects from mapInArrow for a Spark schema."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(schema, timezone="UTC")


def arrow_batches(rows: Iterator[tuple], schema, size: int = BATCH_ROWS) -> Iterator:
    """Rows (ROW_COLUMNS) -> RecordBatches of ``schema`` (ENTRY_COLUMNS: mtime from
    mtime_ns), at most ``size`` rows each."""
    import pyarrow as pa
    at = [n for n, _ in ROW_COLUMNS].index("mtime_ns")
    while True:
        chunk = list(islice(rows, size))
        if not chunk:
            return
        cols = list(zip(*chunk))
        cols.insert(at, [ns // 1000 for ns in cols[at]])  # mtime: microseconds
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, schema)], schema=schema)


def write_entries(spark, repo, ref: str, out: str, mode: str = "errorifexists") -> dict:
    """Write entries(ref) as Parquet under ``out`` (``s3://BUCKET/PREFIX``, or a path
    Spark can write); returns a summary (commit, ranges, entries, seconds)."""
    cid, mr = tree_of(repo, ref)
    t0 = time.monotonic()
    df = ranges_frame(spark, repo.store.url, list(mr.ids))
    try:
        if out.startswith("s3://"):  # gravfs's S3 code: Spark here has no S3 file system
            from gravfs.spark.s3parquet import write_parquet
            write_parquet(df, out, repo.store.url, arrow_schema(df.schema))
        else:
            df.write.mode(mode).parquet(out)
    except Exception as exc:  # py4j/pyspark errors: one line
        from gravfs.spark.runtime import job_failed
        raise job_failed(exc, f"writing the entries of {ref} to {out}") from exc
    secs = time.monotonic() - t0
    log.info("wrote %d entries of %s to %s in %.1fs", mr.count, cid[:12], out, secs)
    return {"commit": cid, "ranges": len(mr.ids), "entries": mr.count, "out": out,
            "seconds": round(secs, 3)}


def out_mode(repo, out: str) -> str:
    """Spark's save mode for ``out``: a local path must be absent or an empty directory
    (else GravfsError, before Spark starts); an empty one is written into. Never the
    repository's own store or state directory (their files are not data: GC or the
    next import would take the table for theirs)."""
    if not out:
        raise GravfsError("no output directory given (--out DIR)")
    what = owner_of(repo.store.url, repo.workspace.state_dir, out)
    if what is not None:
        raise GravfsError(f"cannot write entries into {out}: it is in {what}")
    scheme = out.split("://", 1)[0] if "://" in out else ""
    if scheme == "s3":
        from gravfs.spark.s3parquet import check_empty
        check_empty(out)
        return "errorifexists"
    if scheme not in ("", "file"):
        return "errorifexists"  # another file system: Spark checks
    path = out[len("file://"):] if scheme else out
    if not os.path.exists(path):
        return "errorifexists"
    if not os.path.isdir(path) or os.listdir(path):
        raise GravfsError(f"{out}: exists and is not an empty directory")
    return "overwrite"
