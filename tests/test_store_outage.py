"""S3 outages: a stopped SeaweedFS gives StoreUnavailableError quickly; a restart heals."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gravfs.errors import StoreUnavailableError
from gravfs.store.tier import LocalTier


def test_outage_raises_unavailable_then_recovers(s3_server, tmp_path):
    store = s3_server.make_store(max_attempts=2, connect_timeout=1, read_timeout=5)
    store.put("k", b"v")
    _, version = store.read_versioned("k")
    src = tmp_path / "src"
    src.write_bytes(b"u" * 1000)
    ops = {
        "get": lambda: store.get("k"),
        "get_range": lambda: store.get_range("k", 0, 1),
        "download": lambda: store.download("k", str(tmp_path / "dl")),
        "put": lambda: store.put("k2", b"x"),
        "upload": lambda: store.upload("k3", str(src)),
        "put_if_absent": lambda: store.put_if_absent("k4", b"x"),
        "read_versioned": lambda: store.read_versioned("k"),
        "compare_and_swap": lambda: store.compare_and_swap("k", version, b"w"),
        "delete": lambda: store.delete("k"),
        "list": lambda: list(store.list("")),
        "size": lambda: store.size("k"),
        "tier": lambda: LocalTier(store, str(tmp_path / "cache")).acquire("data/ab/cd"),
    }
    s3_server.stop()
    try:
        for name, op in ops.items():
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError) as info:
                op()
            elapsed = time.monotonic() - t0
            print(f"{name}: gave up after {elapsed:.2f}s")
            assert elapsed < 10, f"{name} took {elapsed:.1f}s to give up"
            msg = str(info.value)
            assert "unavailable" in msg and s3_server.endpoint_url in msg, msg
    finally:
        s3_server.start()
    assert store.get("k") == b"v"
    assert store.compare_and_swap("k", version, b"w") != version
    store.put("k2", b"x")
    assert list(store.list("")) == ["k", "k2"]


def test_retries_ride_out_a_short_restart(s3_server):
    store = s3_server.make_store(max_attempts=10, connect_timeout=1)
    store.put("k", b"v")
    s3_server.stop()
    result: list = []
    # The read retries in a thread; the server is restarted from this (main)
    # thread, which outlives it (see s3server._child_setup).
    reader = threading.Thread(target=lambda: result.append(store.get("k")))
    t0 = time.monotonic()
    try:
        reader.start()
        time.sleep(0.5)
        assert reader.is_alive()  # still retrying while the server is down
    finally:
        s3_server.start()
    reader.join(timeout=90)
    assert result == [b"v"]  # botocore's backoff outlasted the restart
    assert time.monotonic() - t0 < 90


def test_hung_server_times_out_as_unavailable(s3_server):
    store = s3_server.make_store(max_attempts=2, connect_timeout=1, read_timeout=1)
    store.put("k", b"v")
    os.kill(s3_server.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailableError) as info:
            store.get("k")
        assert time.monotonic() - t0 < 15
        assert "timeout" in str(info.value).lower()
    finally:
        os.kill(s3_server.proc.pid, signal.SIGCONT)
    assert store.get("k") == b"v"
