"""The mount's background warm-up: its branch's ranges opened while it is idle.

Started once the mount is ready (a lookup never waits for it), on its own thread.
It opens the next range only if no metadata request came since it opened the last,
else once QUIET_S passes without one: with the GIL shared as any thread shares it,
a stream of cold random stats on a young mount ran 9% slower on a 10M-entry branch
(1,492 against 1,643/s, medians of three mounts; the warm-up opened all 2,816
ranges, the stats needed about half), so requests come first and the warm-up takes
the pauses between them. Then a request waits at most for one range's open. What
it opens, and why, is gravfs.version.committed.warmup's; ``-o warm_ranges=N`` bounds
it (0: none).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from gravfs.errors import GravfsError, NotFoundError
from gravfs.fuse.spin import ACTIVITY
from gravfs.version.committed.warmup import warm_ranges

log = logging.getLogger(__name__)

QUIET_S = 0.02  # no metadata request for this long: the mount is idle, a range may open


class RangeWarmer:
    """One warm-up of ``branch``'s ranges (up to ``limit``), stoppable at unmount."""

    def __init__(self, repo, branch: str, limit: int) -> None:
        self.repo = repo
        self.branch = branch
        self.limit = limit
        self.waits = 0  # pauses for requests
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._seen = 0

    def start(self) -> None:
        if self.limit <= 0 or self._thread is not None:
            return
        self._seen = ACTIVITY.count
        self._thread = threading.Thread(target=self._run, name="gravfs-warm", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the range being opened (before the repository closes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():  # in a store request (an outage): it ends with it
                log.info("range warm-up still waiting on the store; unmounting anyway")

    def _between(self) -> bool:
        """Go on once no request has come for QUIET_S (False: unmounting)."""
        while not self._stop.is_set():
            seen = ACTIVITY.count
            if seen == self._seen:
                return True
            self._seen = seen
            self.waits += 1
            self._stop.wait(QUIET_S)
        return False

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self.repo.resolve(self.branch)  # the head read (from the store) outside a txn
            with self.repo.staging.read_txn() as txn:
                metarange = self.repo.layers(self.branch, txn).metarange
            opened, missing = warm_ranges(self.repo.committed.ranges, metarange, self.limit,
                                          self._between)
        except NotFoundError as exc:
            log.debug("no range warm-up: %s", exc)
            return
        except GravfsError as exc:  # the store out of reach, a damaged metarange: lookups say so
            log.info("range warm-up of branch %s stopped: %s", self.branch, exc)
            return
        except Exception:
            if self._stop.is_set():  # the repository closed under it
                log.debug("range warm-up of branch %s ended by the unmount", self.branch,
                          exc_info=True)
            else:
                log.exception("range warm-up of branch %s", self.branch)
            return
        log.info("opened %d ranges of branch %s ahead of lookups in %.2f s, %d pauses for "
                 "requests%s", opened, self.branch, time.monotonic() - started, self.waits,
                 f" ({missing} not in the local tier: left to their first lookup)"
                 if missing else "")
