"""The provenance index: where a content or a path has been, without Spark.

``gravfs spark index`` (gravfs.spark.index) writes Parquet tables sorted by
their key under ``_gravfs/index/`` with a sidecar of row-group fences per
file (layout.py) and a manifest of what is indexed (manifest.py). The
reader (reader.py) answers point lookups from a few row groups through the
local tier; queries.py joins them into ``gravfs provenance`` and
``gravfs log REF -- PATH``. bruteforce.py is the reference answer (every
commit's tree read) the tests and the benchmark compare with.
"""
