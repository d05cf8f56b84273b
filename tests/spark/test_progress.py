"""Stage progress lines (tasks done/total, rows), as the CLI draws them on a terminal."""

from __future__ import annotations

import io

import pytest

from gravfs.spark.progress import stage_progress

pytestmark = pytest.mark.spark


def test_a_final_line_per_stage(spark):
    sc = spark.sparkContext
    out = io.StringIO()
    with stage_progress(sc, stream=out, interval=0.05):
        sc.parallelize(range(1000), 4).map(lambda x: (x % 7, x)).reduceByKey(
            lambda a, b: a + b, 3).collect()
    lines = [ln.rsplit("\r", 1)[-1].replace("\x1b[K", "") for ln in out.getvalue().split("\n")
             if ln]
    assert len(lines) == 2, out.getvalue()
    assert lines[0].endswith("4/4 tasks") and lines[1].endswith("3/3 tasks"), lines
    assert lines[1].startswith("stage ") and "(collect)" in lines[1], lines


def test_stages_that_ended_between_polls_get_one_line_each(spark):
    """A poll that finds two stages ended, none running (the job ran between polls),
    drew both without leaving the first final, and the next poll drew both again."""
    from gravfs.spark.progress import StageProgress

    sc = spark.sparkContext
    out = io.StringIO()
    p = StageProgress(sc, out, interval=30)  # polled here only
    p.start()
    try:
        sc.parallelize(range(1000), 4).map(lambda x: (x % 7, x)).reduceByKey(
            lambda a, b: a + b, 3).collect()
        p.poll()
    finally:
        p.stop()
    lines = [ln.rsplit("\r", 1)[-1].replace("\x1b[K", "") for ln in out.getvalue().split("\n")
             if ln]
    assert len(lines) == 2, out.getvalue()
    assert lines[0].endswith("4/4 tasks") and lines[1].endswith("3/3 tasks"), lines


def test_silent_when_stderr_is_not_a_terminal(spark, capsys):
    sc = spark.sparkContext
    with stage_progress(sc):
        sc.parallelize(range(10), 2).count()
    assert capsys.readouterr().err == ""


def test_rows_counted_per_stage(spark):
    """A job's counter shows on its stage's line; the final line has every task's rows."""
    from gravfs.spark.progress import counter

    sc = spark.sparkContext
    items = counter(sc, "items")

    def count(it):
        n = 0
        for x in it:
            n += 1
            yield x
        items.add(n)

    out = io.StringIO()
    with stage_progress(sc, stream=out, interval=30):  # only the final poll draws
        sc.parallelize(range(1000), 4).mapPartitions(count).count()
    lines = [ln.rsplit("\r", 1)[-1].replace("\x1b[K", "") for ln in out.getvalue().split("\n")
             if ln]
    assert len(lines) == 1 and lines[0].endswith("(count): 4/4 tasks, 1,000 rows items"), lines
