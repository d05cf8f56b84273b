"""What a child process wrote to a log file since an offset: why it failed, in its words.

The mount daemon's stderr (libfuse, fusermount3) and the Spark driver's JVM both write
into a log file gravfs keeps; a failed start is explained by the lines written since
it began.
"""

from __future__ import annotations

from typing import Optional

TAIL = 1 << 16  # bytes read past the offset: a start's complaint is in its first lines


def size(path: Optional[str]) -> int:
    """The file's size now (0 when there is none): the offset to read from later."""
    if path is None:
        return 0
    try:
        with open(path, "rb") as f:
            return f.seek(0, 2)
    except OSError:
        return 0


def lines_since(path: Optional[str], start: int) -> list[str]:
    """The lines written to ``path`` from ``start`` on (the first TAIL bytes), or []."""
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(TAIL).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
