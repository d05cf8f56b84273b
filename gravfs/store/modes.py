"""File modes of what gravfs writes: private to its owner unless a store is shared.

A file a user made unreadable to others through the mount must not be readable
by them in a copy gravfs keeps: the state dir (workspace, tier, pending
uploads, local files, logs, LMDB) and a local store hold those copies. So
directories are created 0700 and files 0600. A local store is shared with a
group when its root directory has the set-group-ID bit (``chmod 2770``, the
usual mark of a group directory, which also gives new files the root's group):
its directories and files then also get the root's group bits (read and write,
never execute for files); others never get any.

Directories made by an older gravfs with looser modes are tightened when
opened (only directories gravfs owns: never the store root or the state dir
itself, which a user may have pointed anywhere).
"""

from __future__ import annotations

import logging
import os
import stat

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def store_modes(root_mode: int) -> tuple[int, int]:
    """(directory mode, file mode) for a local store whose root has ``root_mode``."""
    if not root_mode & stat.S_ISGID:
        return PRIVATE_DIR, PRIVATE_FILE
    group = root_mode & 0o070
    return PRIVATE_DIR | group | stat.S_ISGID, PRIVATE_FILE | (group & 0o060)


def make_dir(path: str, mode: int = PRIVATE_DIR, exact: bool = False) -> bool:
    """Create ``path`` and its missing parents with ``mode``; True if ``path`` was created.

    ``exact``: set the mode even where the umask takes bits away (group sharing).
    """
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if parent == path:
            raise
        make_dir(parent, mode, exact)
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            return False
    if exact:
        os.chmod(path, mode)
    return True


def private_dir(path: str) -> str:
    """``path`` as a directory only its owner can enter: created 0700, or tightened to it."""
    if not make_dir(path):
        tighten(path, PRIVATE_DIR)
    return path


def tighten(path: str, mode: int) -> None:
    """Take away permission bits beyond ``mode`` from a directory of ours (best effort)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    extra = stat.S_IMODE(st.st_mode) & 0o777 & ~mode
    if not extra or st.st_uid != os.geteuid():
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~extra)
        log.info("tightened the mode of %s to %o (it gave access to %s)", path,
                 stat.S_IMODE(st.st_mode) & ~extra, "others" if extra & 0o007 else "its group")
    except OSError as exc:
        log.warning("cannot tighten the mode of %s: %s", path, exc)
