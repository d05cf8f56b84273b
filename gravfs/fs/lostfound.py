"""This host's ``lost+found``: ``<workspace>/lost+found/<branch>/<path>`` keeps content
that could not land in its branch (a file closed after its branch was deleted, one
that could not be staged at unmount, what was staged on a branch deleted elsewhere),
where nothing of gravfs picks it up again. A name there is always a whole file."""

from __future__ import annotations

import os
import tempfile
from typing import BinaryIO, Callable

from gravfs.cleanup import unlink_quiet
from gravfs.fs.paths import escape_key
from gravfs.version.config import Workspace


def lost_found_path(workspace: Workspace, branch: str, key: bytes) -> str:
    """Where ``key`` of ``branch`` is saved (a name that is taken gets ``.1``, ``.2``...
    from ``free_name``); its path as listings show it (a foreign key's ".." is a name)."""
    return os.path.join(workspace.sub("lost+found"), branch,
                        os.fsdecode(escape_key(key, directory=False)))


def free_name(dest: str) -> str:
    """``dest``, or ``dest.N`` for the first N not taken; its directory made."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    taken, n = dest, 0
    while os.path.lexists(dest):
        n += 1
        dest = f"{taken}.{n}"
    return dest


def save_whole(dest: str, write: Callable[[BinaryIO], object]) -> str:
    """``write`` the content to ``dest`` (or ``dest.N`` when taken), whole or not at
    all: beside it under a hidden temp name, synced, then linked into place (a name
    that showed while the copy was written would have shown empty, then partial).
    Returns the name it got."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".rescue-")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        taken, n = dest, 0
        while True:
            try:
                os.link(tmp, dest)
                return dest
            except FileExistsError:
                n += 1
                dest = f"{taken}.{n}"
    finally:
        unlink_quiet(tmp)
