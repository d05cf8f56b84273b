"""gravfs's Spark pipelines (PySpark): the runtime and the jobs, also a Python API.

``import_tree(spark, repo_or_store_url, src, branch, prefix, message)`` imports
a local or shared directory tree (``import_s3``: an S3 prefix, ``import_manifest``:
an inventory manifest; ``by_reference=True``: zero-copy); ``entries(spark, store, ref)`` and
``diff(spark, store, a, b)`` are a commit's entries and two refs' difference as
DataFrames; ``check_export``/``run_export`` copy a commit's files out;
``build_index(spark, repo, full=False)`` builds or extends the provenance index;
``start_session`` starts the SparkSession the
CLI uses (a session of your own on a cluster needs ``runtime.ship_package``). Names are loaded on first use, so the CLI's parser (which registers
``gravfs spark``) loads nothing of the jobs, and pyspark only when a job runs.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "import_tree": "gravfs.spark.importer",
    "import_s3": "gravfs.spark.importer",
    "import_manifest": "gravfs.spark.importer",
    "SparkImportResult": "gravfs.spark.importer",
    "start_session": "gravfs.spark.runtime",
    "gc": "gravfs.spark.gc",
    "GcResult": "gravfs.spark.gc",
    "SparkStartError": "gravfs.spark.runtime",
    "SparkJobError": "gravfs.spark.runtime",
    "entries": "gravfs.spark.tables",
    "diff": "gravfs.spark.treediff",
    "check_export": "gravfs.spark.export",
    "run_export": "gravfs.spark.export",
    "build_index": "gravfs.spark.index",
    "IndexResult": "gravfs.spark.index",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'gravfs.spark' has no attribute {name!r}")
