"""A SparkSession (local[2]) shared by the tests of one module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def spark():
    from gravfs.spark.runtime import start_session

    s = start_session("local[2]", [("spark.ui.enabled", "false"),
                                   ("spark.sql.shuffle.partitions", "4"),
                                   ("spark.driver.memory", "1g")])
    yield s
    s.stop()
