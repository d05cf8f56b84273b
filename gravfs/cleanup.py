"""Removing temporary files on the way out of a failed or finished write.

A leftover temp file is harmless (fsck and the next run sweep them); an error while
removing one must neither hide the error being handled nor stop the caller.
"""

from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger(__name__)


def unlink_quiet(path: str | bytes) -> None:
    """Remove ``path``; a missing one is fine, any other failure is logged."""
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno == errno.EROFS:  # nothing could have been written there either
            log.debug("could not remove %r: %s", path, e)
        elif e.errno != errno.ENOENT:
            log.warning("could not remove %r: %s", path, e)
