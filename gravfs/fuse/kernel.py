"""What the running kernel's FUSE does that the daemon's choices depend on."""

from __future__ import annotations

import os
import re
from typing import Optional

# From Linux 6.6 a write through an open that bypasses the page cache (FOPEN_DIRECT_IO)
# drops the pages other opens of the file cached for its range first.
DIRECT_WRITES_SINCE = (6, 6)


def release(text: Optional[str] = None) -> tuple[int, int]:
    """(major, minor) of the running kernel, or of ``text`` as uname prints it;
    (0, 0) when it does not start with two numbers."""
    m = re.match(r"(\d+)\.(\d+)", os.uname().release if text is None else text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def direct_writes(text: Optional[str] = None) -> bool:
    """Whether write-only opens may bypass the page cache without a reader holding the
    file open seeing stale pages (see DIRECT_WRITES_SINCE). Bypassing saves a request
    a write: the kernel asks for security.capability before every cached write."""
    return release(text) >= DIRECT_WRITES_SINCE
