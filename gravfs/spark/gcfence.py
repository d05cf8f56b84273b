"""The sweep fence as a lock: one GC sweep at a time per store.

Writers that reuse an old object look for ``SWEEP_FENCE`` (gravfs.store.base)
to know a sweep may be deleting. Two overlapping sweeps would each remove the
fence when they end, leaving the other one sweeping unannounced; so a sweep
takes the fence by compare-and-swap (it must be absent), refreshes it while it
runs, and removes it only while it still holds it.

A fence left by a sweep that died is taken over: at once when its holder ran on
this host and its process is gone, else once it has gone STALE_AFTER seconds
without a refresh. Otherwise the new run is refused, naming the holder.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Optional

from gravfs.errors import GravfsError, NotFoundError, PreconditionFailedError
from gravfs.store.base import SWEEP_FENCE, fence_holder

log = logging.getLogger(__name__)

REFRESH_EVERY = 30.0   # seconds between refreshes of a held fence
STALE_AFTER = 600.0    # a fence not refreshed for this long is a dead run's


class FenceHeldError(GravfsError):
    """Another sweep holds the fence."""


class SweepFence:
    """``with SweepFence(store, run_id):`` holds the fence for one run's sweep."""

    def __init__(self, store, run_id: str):
        self.store, self.run_id = store, run_id
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None
        self._body = json.dumps({"run": run_id, "started": time.time(),
                                 "host": socket.gethostname(), "pid": os.getpid()}).encode()

    def __enter__(self) -> "SweepFence":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        try:
            self.store.compare_and_swap(SWEEP_FENCE, None, self._body)
        except PreconditionFailedError:
            self._take_over()
        self._beat = threading.Thread(target=self._refresh, name="gc-fence", daemon=True)
        self._beat.start()

    def _take_over(self) -> None:
        try:
            body, version = self.store.read_versioned(SWEEP_FENCE)
        except NotFoundError:  # released meanwhile
            body, version = None, None
        if body is not None:
            holder = fence_holder(body)
            info = self.store.stat(SWEEP_FENCE)
            age = time.time() - info.mtime if info is not None else 0.0
            if _alive(holder, age):
                raise FenceHeldError(
                    f"garbage collection run {holder.get('run', '?')} is sweeping this store "
                    f"(host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, fence "
                    f"refreshed {age:.0f}s ago); run gc when it has finished (a fence its "
                    f"run left when it died is taken over after {STALE_AFTER:.0f}s)")
            log.warning("taking over the sweep fence of run %s (its process is gone or it "
                        "was not refreshed for %.0fs)", holder.get("run", "?"), age)
        try:
            self.store.compare_and_swap(SWEEP_FENCE, version, self._body)
        except PreconditionFailedError:
            raise FenceHeldError("another garbage collection run took the sweep fence at "
                                 "the same moment; run gc again") from None

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_EVERY):
            try:
                self.store.touch(SWEEP_FENCE)
            except Exception as exc:  # the next beat tries again; the sweep goes on
                log.warning("could not refresh the sweep fence: %s", exc)

    def release(self) -> None:
        """Remove the fence if this run still holds it."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        try:
            body, version = self.store.read_versioned(SWEEP_FENCE)
        except NotFoundError:
            return
        if fence_holder(body).get("run") != self.run_id:
            log.warning("the sweep fence is run %s's now; left in place",
                        fence_holder(body).get("run", "?"))
            return
        try:
            self.store.compare_and_swap(SWEEP_FENCE, version, None)
        except PreconditionFailedError:
            log.warning("the sweep fence changed while it was being removed; left in place")


def _alive(holder: dict, age: float) -> bool:
    """May the fence's holder still be sweeping?"""
    if age >= STALE_AFTER:
        return False
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    return True
