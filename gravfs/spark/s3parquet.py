"""A DataFrame written as Parquet under ``s3://BUCKET/PREFIX`` by gravfs's own S3 code.

Spark writes ``s3://`` only through Hadoop's S3 connector (hadoop-aws and its AWS
SDK jars), which gravfs does not ship; the store's S3 settings (endpoint,
credentials, retries) already reach every executor. Each task writes its rows to
one local Parquet file (Snappy, as Spark writes) and uploads it as
``part-NNNNN.snappy.parquet``, named by its partition: a retried or speculative
task writes the same key again, never a second copy. The driver writes
``_SUCCESS`` last, as Spark's committer does, so a reader that waits for it
never sees a partial table. An empty table is one file with the schema.
"""

from __future__ import annotations

import os
import tempfile

from gravfs.errors import GravfsError
from gravfs.spark.exportdest import SUCCESS, open_dest
from gravfs.spark.taskstore import task_store

_DDL = "key string, rows long"


def check_empty(url: str) -> None:
    """A missing bucket, bad credentials or a prefix that holds objects, before Spark
    starts (as a local ``--out`` must be absent or empty)."""
    if not open_dest(url).is_empty():
        raise GravfsError(f"{url}: holds objects already (write to an empty prefix)")


def _upload_parts(url: str, store_url: str):
    """mapInArrow: a partition's batches -> its Parquet part on S3; one row per part."""
    def run(batches):
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        fd, tmp = tempfile.mkstemp(suffix=".parquet", dir=task_store(store_url).scratch)
        os.close(fd)
        try:
            writer, rows = None, 0
            for b in batches:
                if writer is None:
                    writer = pq.ParquetWriter(tmp, b.schema, compression="snappy")
                writer.write_batch(b)
                rows += b.num_rows
            if writer is None:
                return  # an empty partition writes no part, as Spark's writer
            writer.close()
            key = f"part-{part:05d}.snappy.parquet"
            open_dest(url).upload(key, tmp)
        finally:
            os.unlink(tmp)
        yield pa.RecordBatch.from_pylist([{"key": key, "rows": rows}],
                                         schema=pa.schema([("key", pa.string()),
                                                           ("rows", pa.int64())]))
    return run


def write_parquet(df, url: str, store_url: str, arrow_schema) -> int:
    """Write ``df`` under ``url``; returns the rows written. Spark errors pass through
    (the caller names its job)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    got = df.mapInArrow(_upload_parts(url, store_url), _DDL).collect()
    dest = open_dest(url)
    if not got:  # no rows: one file with the schema, so readers find the columns
        fd, tmp = tempfile.mkstemp(suffix=".parquet")
        os.close(fd)
        try:
            pq.write_table(pa.table({f.name: pa.array([], f.type) for f in arrow_schema},
                                    schema=arrow_schema), tmp, compression="snappy")
            dest.upload("part-00000.snappy.parquet", tmp)
        finally:
            os.unlink(tmp)
    dest.put_bytes(SUCCESS, b"")
    return sum(r["rows"] for r in got)
