"""One sweep at a time: the fence is taken by compare-and-swap, refused while its
holder may be sweeping, taken over from a dead one, and removed only by its holder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gravfs.spark import gcfence
from gravfs.spark.gcfence import FenceHeldError, SweepFence
from gravfs.store.base import SWEEP_FENCE
from gravfs.store.local import LocalStore


@pytest.fixture
def store(tmp_path):
    return LocalStore(str(tmp_path / "store"))


def _holder(store) -> str:
    return json.loads(store.get(SWEEP_FENCE))["run"]


def _plant(store, run: str, host: str, pid: int, age: float = 0.0) -> None:
    """A fence as another run left it, last refreshed ``age`` seconds ago."""
    store.put(SWEEP_FENCE, json.dumps({"run": run, "started": 0, "host": host,
                                       "pid": pid}).encode())
    if age:
        t = time.time() - age
        os.utime(store._path(SWEEP_FENCE), (t, t))


def test_second_sweep_refused_while_the_first_holds_the_fence(store):
    a = SweepFence(store, "run-a")
    a.acquire()
    try:
        with pytest.raises(FenceHeldError, match="run-a is sweeping"):
            SweepFence(store, "run-b").acquire()
        assert _holder(store) == "run-a"
    finally:
        a.release()
    assert not store.exists(SWEEP_FENCE)
    with SweepFence(store, "run-b"):
        assert _holder(store) == "run-b"
    assert not store.exists(SWEEP_FENCE)


def test_fence_of_a_dead_process_on_this_host_is_taken_over(store):
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)
    _plant(store, "run-dead", gcfence.socket.gethostname(), int(p.stdout))
    with SweepFence(store, "run-new"):
        assert _holder(store) == "run-new"
    assert not store.exists(SWEEP_FENCE)


def test_fence_of_another_host_is_taken_over_only_when_stale(store):
    _plant(store, "run-far", "another-host", 1, age=gcfence.STALE_AFTER / 2)
    with pytest.raises(FenceHeldError, match="another-host"):
        SweepFence(store, "run-new").acquire()
    _plant(store, "run-far", "another-host", 1, age=gcfence.STALE_AFTER + 5)
    with SweepFence(store, "run-new"):
        assert _holder(store) == "run-new"


def test_release_leaves_a_fence_another_run_took_over(store):
    a = SweepFence(store, "run-a")
    a.acquire()
    _plant(store, "run-b", "another-host", 1)  # (as a take-over after a long stall does)
    a.release()
    assert _holder(store) == "run-b"


def test_held_fence_is_refreshed(store, monkeypatch):
    monkeypatch.setattr(gcfence, "REFRESH_EVERY", 0.05)
    with SweepFence(store, "run-a"):
        first = store.stat(SWEEP_FENCE).mtime
        deadline = time.monotonic() + 10
        while store.stat(SWEEP_FENCE).mtime == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.stat(SWEEP_FENCE).mtime > first
