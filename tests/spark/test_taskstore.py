"""What a Spark task opens: the repository's store from its URL."""

from __future__ import annotations

import socket

import pytest

from gravfs.errors import GravfsError
from gravfs.fs.repository import Repository
from gravfs.spark.taskstore import TaskStore


def test_a_worker_that_does_not_see_the_store_says_so(tmp_path):
    """A local store on the driver's disk, a cluster master: each executor on another
    host found no repository there and the job failed with "object _gravfs/repo.json
    not found"; it names the worker's host and what a local store needs."""
    with pytest.raises(GravfsError) as exc:
        TaskStore(str(tmp_path / "not-here"))
    said = str(exc.value)
    assert f"Spark worker on {socket.gethostname()} sees it" in said
    assert "a path every worker sees" in said and "s3://" in said


def test_a_worker_writes_into_the_repository_it_opens(tmp_path):
    store = str(tmp_path / "store")
    Repository.init(store, str(tmp_path / "state")).close()
    ts = TaskStore(store)
    address, size = ts.data.put_bytes(b"from a task")
    assert size == 11 and ts.store.get(address) == b"from a task"
