"""The mount's background warm-up: its branch's ranges opened while it is young.

Started once the mount is ready (a lookup never waits for it), on its own thread,
marked as thread work (gravfs.threadwork) so the event loop does not poll over it.
It shares the GIL as any thread does (a request waits at most the switch interval):
giving it up after each range instead (``time.sleep(0)``) left it running for up to
0.7 s under a stream of cold stats on a 1M-entry branch, 0.2-0.34 s without, and
the stats were no faster for it (medians 3,124 and 3,228/s, six mounts each).
What it opens, and why, is gravfs.version.committed.warmup's; ``-o warm_ranges=N``
bounds it (0: none).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from gravfs import threadwork
from gravfs.errors import GravfsError, NotFoundError
from gravfs.version.committed.warmup import warm_ranges

log = logging.getLogger(__name__)


class RangeWarmer:
    """One warm-up of ``branch``'s ranges (up to ``limit``), stoppable at unmount."""

    def __init__(self, repo, branch: str, limit: int) -> None:
        self.repo = repo
        self.branch = branch
        self.limit = limit
        self.result: Optional[tuple[int, int]] = None  # (opened, not in the tier)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        if self.limit <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gravfs-warm", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the range being opened (before the repository closes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _between(self) -> bool:
        return not self._stop.is_set()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            with threadwork.working():
                with self.repo.staging.read_txn() as txn:
                    metarange = self.repo.layers(self.branch, txn).metarange
                self.result = warm_ranges(self.repo.committed.ranges, metarange, self.limit,
                                          self._between)
        except NotFoundError as exc:
            log.debug("no range warm-up: %s", exc)
            return
        except GravfsError as exc:  # the store out of reach, a damaged metarange: lookups say so
            log.info("range warm-up of branch %s stopped: %s", self.branch, exc)
            return
        except Exception:
            log.exception("range warm-up of branch %s", self.branch)
            return
        opened, missing = self.result
        log.info("opened %d ranges of branch %s ahead of lookups in %.2f s%s", opened,
                 self.branch, time.monotonic() - started,
                 f" ({missing} not in the local tier: left to their first lookup)"
                 if missing else "")
