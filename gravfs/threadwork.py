"""Work running on threads that a reader may be waiting for.

The mount's event loop keeps polling for a short while after each request
(gravfs.fuse.spin) instead of sleeping. While it polls it holds the GIL nearly
all the time, and a thread that wants the GIL back after a system call (a
worker's pread, the background check of an object being read, a ranged GET)
then waits up to the interpreter's switch interval (5 ms) each time: measured on
a cold 1 GiB read, which fell from 630 to 480 MB/s. Code that runs such work on
a thread marks it (``working()``, or ``@marked`` on the thread's function), and
the loop polls only while none runs. Requests that keep coming hold the GIL the
same way, so while marked work runs the loop also leaves the GIL now and then
(gravfs.fuse.spin.Activity.hand_over).
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

_lock = threading.Lock()
_running = [0]
_since = [0.0]  # when the running work last went from none to some (monotonic)

T = TypeVar("T")


@contextmanager
def working() -> Iterator[None]:
    """Count the enclosed work as running on a thread (from any thread)."""
    with _lock:
        if not _running[0]:
            _since[0] = time.monotonic()
        _running[0] += 1
    try:
        yield
    finally:
        with _lock:
            _running[0] -= 1


def marked(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` (run on a thread) counts as work while it runs."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with working():
            return fn(*args, **kwargs)

    return wrapper


def idle() -> bool:
    """No marked work is running."""
    return _running[0] == 0


def busy_since() -> float:
    """Since when (time.monotonic) marked work has run without a break; meaningless
    while idle()."""
    return _since[0]
