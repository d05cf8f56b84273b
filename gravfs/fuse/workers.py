"""The worker threads a request's blocking work runs on.

``trio.to_thread.run_sync`` (with a capacity limiter) took 65-70 µs a call with
nothing to do on this project's 2-vCPU host, against 35-38 µs for a job handed to a
waiting thread whose result comes back through the loop's token, as here; in the
daemon a random read of a small file not in the page cache went 362-397 -> 319-364
µs. A read the caches cannot answer, a listing batch not at hand and a staging write
that is not a local one each pay one such trip.

The pool keeps trio's semantics where the daemon relies on them: at most ``size``
jobs run at once (the others wait in the order they came), a job is not abandoned
when its caller is cancelled (the caller waits for it, then sees the cancellation at
its next checkpoint), and the job's exception is the caller's. As trio's, a thread
left idle for ``idle_s`` ends (an in-process test makes many pools). The mount's
start and stop and the watcher's notices to the kernel (rare, and the watcher's
limiter is held to hold them back) stay on trio's threads.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, TypeVar

import outcome
import trio

log = logging.getLogger(__name__)

T = TypeVar("T")


def _not_abandoned(_raise_cancel) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the job runs on: its caller waits for it


IDLE_S = 10.0  # as trio's thread cache


class WorkerPool:
    """Up to ``size`` threads, started as jobs need them (daemon threads: a job stuck
    on the store does not hold the process's exit).

    ``_free`` counts the threads that no job queued or running is counted against,
    ``_owed`` the jobs that came when there was none and no room for another thread:
    the next thread to finish a job takes one of those before it is free. A thread
    ends after ``idle_s`` without a job only while it is free, so every queued job
    always has a thread that will take it."""

    def __init__(self, size: int, name: str = "gravfs-worker", idle_s: float = IDLE_S):
        if size < 1:
            raise ValueError(f"a worker pool needs at least one thread, not {size}")
        self.size = size
        self.name = name
        self.idle_s = idle_s
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._free = 0
        self._owed = 0
        self._started = 0  # (threads' names)

    async def run(self, fn: Callable[[], T]) -> T:
        """fn() on a worker thread; its result or its exception."""
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()
        await trio.lowlevel.checkpoint_if_cancelled()

        def deliver(result: outcome.Outcome) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        start = False
        with self._lock:
            if self._free:
                self._free -= 1
            elif self._threads < self.size:
                self._threads += 1
                self._started += 1
                start = True
            else:
                self._owed += 1
        if start:  # before the job is queued: a thread that cannot start fails the call
            try:
                threading.Thread(target=self._work, name=f"{self.name}-{self._started}",
                                 daemon=True).start()
            except BaseException:
                with self._lock:
                    self._threads -= 1
                raise
        self._jobs.put((fn, deliver))
        return await trio.lowlevel.wait_task_rescheduled(_not_abandoned)  # (unwrapped)

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            try:
                fn, deliver = jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._free:
                        self._free -= 1
                        self._threads -= 1
                        return
                continue
            result = outcome.capture(fn)
            with self._lock:  # free before its caller hears: its next job needs no thread
                if self._owed:
                    self._owed -= 1
                else:
                    self._free += 1
            try:
                deliver(result)
            except trio.RunFinishedError:
                log.debug("a worker's job finished after the event loop did")
            del fn, deliver, result  # (a finished job's frames are not kept alive here)

    def threads(self) -> int:
        """Threads alive now."""
        with self._lock:
            return self._threads
