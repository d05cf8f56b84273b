"""The left-out paths' accumulator on a real SparkContext: a unit reported by two
tasks (as when Spark runs a task again) counts once."""

from __future__ import annotations

import pytest

from gravfs.spark import leftout

pytestmark = pytest.mark.spark


def test_a_unit_run_twice_counts_once(spark):
    sc = spark.sparkContext
    acc = leftout.accumulator(sc)
    found = {("x", False): [f"x/p{i}" for i in range(7)], ("y", True): ["y/q"], ("z", True): []}
    units = [("x", False), ("y", True), ("x", False), ("z", True)]  # x twice: a retry

    def task(unit):
        leftout.note(acc, unit, found[unit])

    sc.parallelize(units, len(units)).foreach(task)
    count, shown = leftout.total(acc)
    assert count == 8  # an int accumulator would say 15
    assert shown == ("x/p0", "x/p1", "x/p2", "x/p3", "x/p4")
    assert len(acc.value) == 2  # a unit that left nothing out sends nothing


def test_nothing_left_out(spark):
    acc = leftout.accumulator(spark.sparkContext)
    spark.sparkContext.parallelize([1, 2], 2).foreach(lambda u: leftout.note(acc, u, []))
    assert leftout.total(acc) == (0, ())
