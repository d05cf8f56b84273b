"""A repository's store as a Spark task sees it: no workspace, no staging.

Executors open the store themselves from its URL and use gravfs's own data
plane (content-addressed uploads) and range writer on it. One TaskStore per
store URL is kept per Python worker process (workers are reused across
tasks); its scratch directory (tier cache, temp SSTs) lives in the
application's SparkFiles directory, which Spark removes with the application.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from typing import Optional

from gravfs.data.objects import DataObjects
from gravfs.errors import GravfsError, NotFoundError
from gravfs.store import open_store
from gravfs.store.local import BatchedLocalStore, DeferredLocalStore, LocalStore
from gravfs.store.tier import LocalTier
from gravfs.version.committed.results import Stats
from gravfs.version.committed.writer import TreeWriter, WriteContext
from gravfs.version.config import REPO_JSON, RepoSettings

TIER_BYTES = 1 << 30

_open: dict[str, "TaskStore"] = {}


class TaskStore:
    """Store, settings, data objects and range writers of one repository."""

    def __init__(self, store_url: str):
        self.store = open_store(store_url)
        try:
            raw = self.store.get(REPO_JSON)
        except NotFoundError:
            # a local path the driver sees and this worker does not (another host's disk)
            raise GravfsError(
                f"no gravfs repository at {store_url} as the Spark worker on "
                f"{socket.gethostname()} sees it: executors open the store themselves, so "
                "a local store must be a path every worker sees (a shared filesystem); "
                "or use s3://") from None
        self.settings = RepoSettings.from_json(raw)
        self.policy = self.settings.ranges.policy()
        self.scratch = tempfile.mkdtemp(prefix="gravfs-task-", dir=_spark_files_dir())
        atexit.register(shutil.rmtree, self.scratch, True)  # Spark's workers exit without it
        self.tier = LocalTier(self.store, os.path.join(self.scratch, "cache"), TIER_BYTES)
        tmp = os.path.join(self.scratch, "tmp")
        os.makedirs(tmp)
        self.data = DataObjects(self.store, self.tier, tmp)
        self._bulk: Optional[tuple[DataObjects, Optional[BatchedLocalStore]]] = None
        self._ctx = WriteContext(self.store, tmp, None, compression=self.settings.compression)

    def bulk_data(self) -> tuple[DataObjects, Optional[BatchedLocalStore]]:
        """Data objects for bulk uploads and their store to publish (None but on a plain
        local store): a task publishes it before it ends (see DeferredLocalStore)."""
        if self._bulk is None:
            if type(self.store) is LocalStore:
                b = DeferredLocalStore(self.store.root)
                self._bulk = DataObjects(b, self.tier, self.data.tmp_dir), b
            else:
                self._bulk = self.data, None
        return self._bulk

    def tree_writer(self, stats: Stats) -> TreeWriter:
        """A writer with the repository's break policy and SST settings (uploads inline)."""
        return TreeWriter(self._ctx, self.policy, stats)


def _spark_files_dir():
    """This application's SparkFiles directory on an executor (Spark removes it with
    the application), or None outside a Spark task (the system's temp dir)."""
    try:
        from pyspark import SparkFiles
        return SparkFiles.getRootDirectory()
    except Exception:  # no pyspark, or no SparkContext in this process
        return None


def task_store(store_url: str) -> TaskStore:
    """This worker process's TaskStore for store_url."""
    ts = _open.get(store_url)
    if ts is None:
        ts = _open[store_url] = TaskStore(store_url)
    return ts
