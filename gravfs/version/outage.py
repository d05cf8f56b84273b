"""Whether the object store is known to be unreachable, and who asks it next.

A repository with a head cache (the mount) goes on reading each branch at the
head it read last while the store cannot be reached, instead of failing every
request once the cached head expired. An unreachable endpoint may take a whole
timeout to fail (connect timeouts times attempts), so while the store is down a
reader asks it again only once per ``retry`` seconds after the last failure, one
at a time; the mount's watcher, which reads heads afresh every poll, asks anyway
and is usually the one that finds the store back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

log = logging.getLogger(__name__)


class StoreOutage:
    """One per repository: readers ask ``may_ask`` before a ref read they could
    answer from the head cache, and every ref read reports how the store did."""

    def __init__(self, retry: float):
        self.retry = retry
        self._lock = threading.Lock()
        self._since: Optional[float] = None  # monotonic time the first failed read was sent
        self._next = 0.0  # no reader asks before this
        self._asking = False

    @property
    def down(self) -> bool:
        return self._since is not None

    def may_ask(self) -> bool:
        """May this reader ask the store now (always, unless it is down)? A reader
        told yes must report with ``failed``, ``answered`` or ``gave_up``."""
        if self._since is None:
            return True
        with self._lock:
            if self._since is None:
                return True
            if self._asking or time.monotonic() < self._next:
                return False
            self._asking = True
            return True

    def failed(self, exc: Exception, sent: Optional[float] = None) -> None:
        """The store could not be reached by a read sent at monotonic time ``sent``
        (default: now). The outage is dated from there: a read that waited out a
        60 s timeout found a store already down for 60 s."""
        now = time.monotonic()
        with self._lock:
            first = self._since is None
            if first:
                self._since = now if sent is None else min(sent, now)
            self._next = now + self.retry
            self._asking = False
        if first:
            log.warning("%s; branches are read at the heads read last until it answers "
                        "(asked again every %.0f s)", exc, self.retry)

    def answered(self) -> None:
        """The store answered a ref read (found or not): the outage, if any, is over."""
        if self._since is None:
            return
        with self._lock:
            since, self._since, self._asking = self._since, None, False
        if since is not None:
            log.info("the object store answers again after %.0f s: branch heads are read "
                     "from it", time.monotonic() - since)

    def gave_up(self) -> None:
        """The reader that was let ask stopped without an answer either way."""
        with self._lock:
            self._asking = False
