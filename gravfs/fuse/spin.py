"""Busy-polling between requests: the event loop stays awake for a short window
after each request instead of going to sleep in epoll_wait.

A request that finds the loop asleep pays for waking an idle CPU (on a virtual
machine, a halted vCPU) and for the caches that emptied meanwhile. A program
that stats, creates or lists one file after another leaves only tens of
microseconds between requests, so with a window of 100 µs the loop never sleeps
while it runs: on the benchmark host first-pass stats of branch paths went from
0.72-0.77x to 0.92-0.98x of the pyfuse3 floor (docs/benchmarks-mount.md, thirteenth
round). The price is CPU: while requests come closer together than the window,
the event loop's thread keeps one core busy; once they stop, it sleeps again
within the window (``-o spin_us=0``: never polls; the default is MountOptions').

Whether polling pays depends on the machine, so the loop tries both (``SpinChoice``).
On an AMD EPYC family 23 host (2026-12-04) polling cost 10% of first-pass stats and
7% of creates: a trip through trio's scheduler takes 6 µs there, about what waking
from epoll_wait costs (why polling also slowed the rest of each request there was not
pinned down); on the Xeon hosts of the thirteenth round it gained 20-37%.
"""

from __future__ import annotations

import logging
import statistics
import time
from typing import Callable, Optional

import trio

from gravfs import threadwork

log = logging.getLogger(__name__)
_clock = time.monotonic

# Requests that move file content keep no poll going: a stream of them is paced by
# the data (the kernel keeps several in flight, so the loop seldom sleeps), and on a
# small machine a polling core is one that the reader, the kernel's I/O and the
# threads that fetch and check the bytes do not get (a cold 1 GiB read: 846 MB/s
# without polling, 741 with).
DATA_REQUESTS = frozenset({"read", "write"})


# A request that comes less than this after the last one is a stream's next request:
# the gap measures the loop's mode (a longer one is a pause, which says nothing of it)
STREAM_GAP_S = 0.001
TRIAL_BLOCK = 64  # a trial takes turns: this many gaps polling, as many sleeping, ...
TRIAL_GAPS = 512  # ... until it has timed this many in each mode
KEEP_REQUESTS = 16 * 2 * TRIAL_GAPS  # then the faster mode stays for this many requests
MARGIN = 0.02  # the other mode must be this much faster to take over
# While work runs on threads, the loop sleeps this long this often (Activity.hand_over):
# long enough for a waiting thread to wake and take the GIL (30 µs did on the EPYC host)
HAND_OVER_EVERY_S = 0.001
HAND_OVER_S = 0.00003


class SpinChoice:
    """Whether polling between requests pays on this machine, found by trying.

    A trial times the gaps between back-to-back requests in both modes, taking turns
    in blocks so that a change of workload weighs on both alike, and keeps the mode
    whose median gap is shorter (the median: a listing or a flush to disk now and
    then says nothing of the mode) for KEEP_REQUESTS requests, untimed; then the next
    trial begins, since the workload may have changed. Gaps, not handler times:
    polling's gain (a woken CPU) and its cost (a core the client, the kernel and its
    wake-ups do not get) both show in how soon the next request comes."""

    __slots__ = ("spin", "keep_left", "_kept", "_gaps")

    def __init__(self, spin: bool = True) -> None:
        self.spin = spin  # the mode now
        self.keep_left = 0  # requests before the next trial (0: a trial runs)
        self._kept = spin  # the mode the last trial chose
        self._gaps: dict[bool, list[float]] = {True: [], False: []}

    def gap(self, seconds: float) -> None:
        """Time one gap of a trial between back-to-back requests (they arrived in mode
        ``spin``)."""
        gaps = self._gaps[self.spin]
        gaps.append(seconds)
        if len(gaps) % TRIAL_BLOCK:
            return
        if len(self._gaps[not self.spin]) < TRIAL_GAPS:
            self.spin = not self.spin
            return
        polling, sleeping = (statistics.median(self._gaps[m]) for m in (True, False))
        kept, other = (polling, sleeping) if self._kept else (sleeping, polling)
        if other < kept * (1 - MARGIN):
            self._kept = not self._kept
        self.spin = self._kept
        self.keep_left = KEEP_REQUESTS
        self._gaps = {True: [], False: []}
        log.debug("between requests (medians) %.1f us polling, %.1f us sleeping: %s for "
                  "the next %d", 1e6 * polling, 1e6 * sleeping,
                  "polling" if self.spin else "sleeping", KEEP_REQUESTS)


class Activity:
    """Requests seen (every handler wrapper calls ``note``), and the poller that
    keeps the loop awake while they come (``run``, a task of the daemon's nursery)
    when polling pays (``choice``)."""

    __slots__ = ("count", "_asleep", "polling", "choice", "_last", "_handed")

    def __init__(self) -> None:
        self.count = 0
        self._asleep: Optional[trio.Event] = None
        self.polling = False
        self.choice = SpinChoice()
        self._last = 0.0
        self._handed = 0.0

    def note(self) -> None:
        """A request arrived (on the event loop's thread)."""
        self.count += 1
        choice = self.choice
        if choice.keep_left:  # (a stale _last then makes the trial's first gap a pause)
            choice.keep_left -= 1
        else:
            now = _clock()
            gap, self._last = now - self._last, now
            if gap < STREAM_GAP_S:
                choice.gap(gap)
        asleep = self._asleep
        if asleep is not None and choice.spin:
            self._asleep = None
            asleep.set()
        if not threadwork.idle():
            self.hand_over()

    def hand_over(self) -> None:
        """Let a thread that waits for the GIL have it. While requests keep the loop
        busy it never blocks, and its brief releases (each system call) do not let a
        waiting thread in: CPython's waiter asks the holder to drop the GIL only after
        a switch interval (5 ms) in which it was not released. So a worker's call
        (statfs, a fetch, a listing) waited until the clients paused: a statfs while
        two clients sent getxattr took 48 ms median, 203 ms at most; with a sleep of
        HAND_OVER_S every HAND_OVER_EVERY_S of thread work, 1.4 ms and 2.7 ms, and the
        clients' rate did not fall (docs/benchmarks-mount.md, 41st round)."""
        now = _clock()
        if now - max(self._handed, threadwork.busy_since()) >= HAND_OVER_EVERY_S:
            time.sleep(HAND_OVER_S)
            self._handed = _clock()

    async def run(self, window_s: float) -> None:
        """Yield to the scheduler (which then polls its file descriptors without
        blocking) until ``window_s`` passes with no new request, or while work runs
        on threads (gravfs.threadwork: they would wait for the GIL); then sleep
        until the next request. While ``choice`` finds sleeping faster, only sleep."""
        checkpoint = trio.lowlevel.checkpoint
        clock = time.monotonic
        idle = threadwork.idle
        choice = self.choice
        while True:
            self.polling = True
            seen = self.count
            until = clock() + window_s
            while choice.spin:
                await checkpoint()
                if not idle():  # even while requests come: those threads need the GIL
                    break
                if self.count != seen:
                    seen = self.count
                    until = clock() + window_s
                elif clock() >= until:
                    break
            self.polling = False
            self._asleep = asleep = trio.Event()
            await asleep.wait()


ACTIVITY = Activity()


def noter(handler: str) -> Callable[[], None]:
    """What a request to ``handler`` calls on arrival: ACTIVITY.note, or nothing for
    DATA_REQUESTS."""
    return _nothing if handler in DATA_REQUESTS else ACTIVITY.note


def _nothing() -> None:
    pass
