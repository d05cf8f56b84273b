"""Worker threads for chunk fetches, a reader's demand before anyone's read-ahead.

With one first-in-first-out pool, a reader that opens a file while others stream
waits behind every chunk their read-ahead has queued (8 ahead each): on SeaweedFS,
the first MiB of a new reader among three streams took 116 ms against 9 ms alone.
Here a fetch a read waits for goes before every queued read-ahead fetch, a queued
read-ahead fetch that a read comes to need moves up (``promote``), and read-ahead
never holds every worker: ``reserve`` of them are kept for reads, so a read's fetch
starts at once instead of after a running one.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, Hashable, Optional

log = logging.getLogger(__name__)


class FetchQueue:
    """Up to ``workers`` daemon threads, started as work comes, each running one
    queued job at a time; each job is known by a key (a chunk), queued once."""

    def __init__(self, workers: int, name: str, reserve: int = 1):
        self._workers = workers
        self._ahead_max = max(1, workers - reserve)  # read-ahead fetches running at once
        self._name = name
        self._cond = threading.Condition()
        self._demand: deque = deque()  # keys, first in first out (stale ones skipped)
        self._ahead: deque = deque()
        self._jobs: dict[Hashable, Callable[[], None]] = {}  # queued, not started
        self._threads: list[threading.Thread] = []
        self._running = 0
        self._running_ahead = 0
        self._closed = False

    def submit(self, key: Hashable, job: Callable[[], None], demand: bool) -> None:
        """Queue ``job`` under ``key`` (not queued already). RuntimeError once closed."""
        with self._cond:
            if self._closed:
                raise RuntimeError("fetch queue closed")
            self._jobs[key] = job
            (self._demand if demand else self._ahead).append(key)
            if len(self._threads) < min(self._workers, len(self._jobs) + self._running):
                t = threading.Thread(target=self._work, daemon=True,
                                     name=f"{self._name}-{len(self._threads)}")
                self._threads.append(t)
                t.start()
            self._cond.notify()

    def promote(self, key: Hashable) -> None:
        """A read now waits for the job under ``key``: run it as a read's, if it has not
        started (its read-ahead place is skipped then)."""
        with self._cond:
            if key in self._jobs:
                self._demand.append(key)
                self._cond.notify()

    def close(self) -> None:
        """Drop the queued jobs; running ones finish, then every thread ends."""
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._demand.clear()
            self._ahead.clear()
            self._cond.notify_all()

    def _next(self) -> Optional[tuple[Callable[[], None], bool]]:
        """(job, is a read's) to run next, waiting for one; None once closed."""
        while True:
            while self._demand:
                job = self._jobs.pop(self._demand.popleft(), None)
                if job is not None:
                    return job, True
            while self._ahead and self._running_ahead < self._ahead_max:
                job = self._jobs.pop(self._ahead.popleft(), None)
                if job is not None:
                    return job, False
            if self._closed:
                return None
            self._cond.wait()

    def _work(self) -> None:
        while True:
            with self._cond:
                got = self._next()
                if got is None:
                    return
                job, demand = got
                self._running += 1
                self._running_ahead += not demand
            try:
                job()
            except Exception:  # a fetch reports its errors to its readers; this is a bug
                log.exception("%s: a fetch failed outside its readers' future", self._name)
            finally:
                with self._cond:
                    self._running -= 1
                    self._running_ahead -= not demand
                    self._cond.notify()  # read-ahead held back may run now
