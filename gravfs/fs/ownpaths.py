"""The directories a repository keeps on this host: its local store (when the store is
a directory) and gravfs's state directory (staging, cache, logs).

Their files change while gravfs runs, and gravfs reads and writes them by path. So
they are never data: an import leaves them out (as git leaves out .git), an export
does not write into them, and a mount point may not hide them from its own daemon.
"""

from __future__ import annotations

import os

from gravfs.store import local_path


def within(path: str, base: str) -> bool:
    """Whether real path ``path`` is ``base`` or under it."""
    return path == base or path.startswith(base.rstrip("/") + "/")


def own_dirs(store_url: str, state_dir: str) -> list[tuple[str, str]]:
    """(real path, what it is) of the local store, if the store is local, and of the state
    directory."""
    out = []
    store = local_path(store_url)
    if store is not None:
        out.append((os.path.realpath(store), f"this repository's store ({store})"))
    out.append((os.path.realpath(state_dir), f"gravfs's state directory ({state_dir})"))
    return out
