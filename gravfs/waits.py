"""Marking a thread that must not wait on the store or on opening metadata.

The mount answers a lookup on its event loop's thread when everything the
lookup needs is at hand (the branch head cached, the commit parsed, the ranges
it reads in the local tier): a hop to a worker thread and back costs 0.1-0.3 ms
on a small VM, more than such a lookup, and as much as opening a range the
tier holds (its footer, properties and raw index; a page fault or two). Code
about to do slow work (read a head or a commit from the store, parse a
metarange, fetch an object into the tier or wait for another thread's fetch,
fetch a damaged copy again) calls ``may_wait``; on a thread inside
``no_waiting()`` that raises WouldWait before anything was changed, and the
caller runs the whole operation on a worker thread instead.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_marked = threading.local()


class WouldWait(Exception):
    """The operation needs slow work; run it where waiting is allowed."""


@contextmanager
def no_waiting() -> Iterator[None]:
    _marked.on = True
    try:
        yield
    finally:
        _marked.on = False


def may_wait(what: str) -> None:
    """Called before slow work (``what`` names it for the exception)."""
    if getattr(_marked, "on", False):
        raise WouldWait(what)
