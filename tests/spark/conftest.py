"""A SparkSession (local[2]) shared by the tests of one module, and a fresh repository
with tiny ranges (so that small trees span many ranges and several partitions)."""

from __future__ import annotations

import pytest

from gravfs.fs.repository import Repository
from tests.repo_util import small_settings


@pytest.fixture(scope="module")
def spark():
    from gravfs.spark.runtime import start_session

    s = start_session("local[2]", [("spark.ui.enabled", "false"),
                                   ("spark.sql.shuffle.partitions", "4"),
                                   ("spark.driver.memory", "1g")])
    yield s
    s.stop()


@pytest.fixture
def repo(tmp_path):
    r = Repository.init(str(tmp_path / "store"), str(tmp_path / "state"), settings=small_settings())
    yield r
    r.close()
