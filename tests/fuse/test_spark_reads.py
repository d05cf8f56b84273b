"""Spark (local[2]) reading and writing Parquet through the mount, file:// paths only.

Spark's file output committer writes task files under _temporary and renames
them into place, so this exercises create/write/close, directory renames,
listings and deletes the way a data-lake job does. The same job on a local
directory is the reference.
"""

from __future__ import annotations

import os

import pytest

from tests.fuse_util import *  # noqa: F401,F403  (fixtures)
from tests.fuse_util import Mount


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("gravfs-mount-test")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.memory", "1g")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def module_mount(tmp_path_factory):
    m = Mount(str(tmp_path_factory.mktemp("sparkmount"))).init()
    m.cli("branch", "create", "dev")
    m.mount()
    yield m
    m.cleanup()


def _job(spark, base: str, aggregate_base: str) -> list:
    """Write a dataset, read it back, write an aggregate; returns the aggregate rows."""
    from pyspark.sql import functions as F

    df = spark.range(0, 20000).select(
        F.col("id"),
        (F.col("id") % 7).alias("k"),
        (F.col("id") * 3 % 101).cast("double").alias("v"),
        F.concat(F.lit("name-"), (F.col("id") % 13).cast("string")).alias("s"))
    df.repartition(3).write.mode("overwrite").partitionBy("k").parquet(f"file://{base}/events")
    back = spark.read.parquet(f"file://{base}/events")
    assert back.count() == 20000
    agg = back.groupBy("k", "s").agg(F.sum("v").alias("total"), F.count("*").alias("n"))
    agg.coalesce(2).write.mode("overwrite").parquet(f"file://{aggregate_base}/agg")
    rows = spark.read.parquet(f"file://{aggregate_base}/agg").orderBy("k", "s").collect()
    return [tuple(r) for r in rows]


def test_spark_parquet_through_mount(spark, module_mount, tmp_path):
    m = module_mount
    local = str(tmp_path / "local")
    want = _job(spark, local, local)
    assert len(want) == 7 * 13 and sum(r[3] for r in want) == 20000

    got = _job(spark, m.branch_path("lake"), m.branch_path("lake", branch="dev"))
    assert got == want
    main_id = m.commit("main", "events")
    dev_id = m.commit("dev", "aggregate")

    # committed trees read back by Spark give the same answers
    from pyspark.sql import functions as F
    events = spark.read.parquet(f"file://{m.path('commits', main_id, 'lake/events')}")
    assert events.count() == 20000
    assert events.agg(F.sum("id")).collect()[0][0] == sum(range(20000))
    agg = spark.read.parquet(f"file://{m.path('commits', dev_id, 'lake/agg')}")
    assert [tuple(r) for r in agg.orderBy("k", "s").collect()] == want
    # the committed layout is what Spark leaves behind on local disk
    def layout(root):
        out = set()
        for d, _dirs, files in os.walk(root):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), root)
                out.add(os.path.dirname(rel) + "/" + ("part" if f.startswith(("part-", ".part-")) else f))
        return out
    assert layout(m.path("commits", main_id, "lake/events")) == layout(os.path.join(local, "events"))
    assert not any("_temporary" in p for p in layout(m.path("commits", main_id, "lake")))
    m.assert_clean_log()


def test_spark_overwrite_in_place(spark, module_mount):
    """A second job overwrites a dataset that is already committed (deletes + renames)."""
    m = module_mount
    path = f"file://{m.branch_path('over')}"
    spark.range(0, 1000).write.mode("overwrite").parquet(path)
    m.commit("main", "first")
    spark.range(5, 505).write.mode("overwrite").parquet(path)
    df = spark.read.parquet(path)
    assert df.count() == 500 and df.agg({"id": "min"}).collect()[0][0] == 5
    cid = m.commit("main", "second")
    assert spark.read.parquet(f"file://{m.path('commits', cid, 'over')}").count() == 500
