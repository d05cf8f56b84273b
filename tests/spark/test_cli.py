"""``gravfs spark import``'s summary line as a user reads it at the terminal."""

from __future__ import annotations

import json
import os
import re

import pytest

from gravfs.fs.repository import Repository
from gravfs.spark.cli import per_second
from tests.repo_util import small_settings
from tests.spark.test_runtime import SPARK_CONF, run_cli


def test_per_second_keeps_a_slow_rate_readable():
    assert per_second(4, 9.3) == "0.4"  # a few files in a JVM's start-up: not "0"
    assert per_second(95, 10.0) == "9.5"
    assert per_second(100, 10.0) == "10"
    assert per_second(1_234_567, 2.0) == "617,284"
    assert per_second(5, 0.0) == "0.0"


@pytest.mark.spark
def test_a_small_import_says_what_it_did_and_left_out_in_words(tmp_path):
    """The executors log each special file they pass over in Spark's log, away from the
    terminal: the summary counts and names them, as ``gravfs import`` warns of each."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    Repository.init(store, state, settings=small_settings()).close()
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "a").write_bytes(b"a")
    (src / "d" / "b").write_bytes(b"bb")
    os.mkfifo(src / "d" / "pipe\n1")
    rc, out, err = run_cli("spark", "import", str(src), "main:t", "--master", "local[1]",
                           "--partitions", "1", *SPARK_CONF, store=store, state=state)
    m = re.fullmatch(r"Imported 2 entries \(copied\) into main:t as commit [0-9a-f]{12} "
                     r"\(1 partition, 1 range, (\d+\.\d)s, ([\d,.]+) entries/s\)\n"
                     r"Note: 1 path of the source left out, not a regular file, directory or "
                     r"symlink \(\"d/pipe\\n1\"\); Spark's log names each\n", out)
    assert m, out
    secs, rate = float(m.group(1)), float(m.group(2).replace(",", ""))
    assert rate > 0 and abs(rate * secs - 2) <= 0.1 * secs + 0.1, out
    os.mkfifo(src / "p2")
    rc, out, err = run_cli("spark", "import", str(src), "main:j", "--master", "local[1]",
                           "--json", *SPARK_CONF, store=store, state=state)
    got = json.loads(out)
    assert (got["entries"], got["left_out"], got["left_out_paths"]) == (
        2, 2, ["d/pipe\n1", "p2"])
