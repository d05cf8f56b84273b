"""The sweep's batching (gravfs.spark.gctasks): dead objects spread thinly over many
listing prefixes still go out in full DeleteObjects requests (1,000 keys), not one
small request per prefix; live objects under the same prefixes stay. Local store
and SeaweedFS; a recording wrapper counts the store's delete_many calls."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gravfs.spark import gctasks
from gravfs.store.local import LocalStore


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(str(tmp_path / "store"))
    return request.getfixturevalue("s3_store")


class Recording:
    """The real store, with the sizes of its delete_many calls recorded."""

    def __init__(self, store):
        self.store, self.deletes = store, []

    def list_info(self, prefix):
        return self.store.list_info(prefix)

    def delete_many(self, keys):
        self.deletes.append(len(keys))
        return self.store.delete_many(keys)


def test_sweep_fills_delete_requests_across_prefixes(store):
    dead = [f"data/{i % 256:02x}/dead{i:05d}" for i in range(2500)]  # ~10 a prefix
    live = [f"data/{i:02x}/live" for i in range(256)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, b"x"), dead + live))
    by_prefix: dict[str, dict[str, int]] = {}
    for k in dead:
        by_prefix.setdefault(gctasks.listing_prefix(k), {})[k] = 1
    rec = Recording(store)
    got = gctasks._sweep_prefixes(rec, sorted(by_prefix), by_prefix, time.time() + 3600, 30.0)
    assert got == (2500, 2500, 0)
    assert sorted(rec.deletes) == [500, 1000, 1000]  # was one request per prefix (~10 keys)
    assert {i.key for i in store.list_info("data/")} == set(live)


def test_a_cache_part_gone_between_the_mark_passes_fails_the_mark(tmp_path):
    """The first pass counted the part as covering kept ranges; skipping it in the
    address pass would leave its objects out of the live set (reported dead)."""
    import pyarrow as pa

    from gravfs.errors import GravfsError
    from gravfs.fs.repository import Repository
    url = str(tmp_path / "store")
    Repository.init(url, str(tmp_path / "state")).close()
    keys = pa.RecordBatch.from_pydict({"key": [gctasks.CACHE_PREFIX + "gone.parquet"]})
    with pytest.raises(GravfsError, match="deleted during the mark"):
        list(gctasks.cache_address_batches(url, iter([keys]), {"r1"}))
