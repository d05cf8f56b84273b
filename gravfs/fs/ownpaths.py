"""The directories a repository keeps on this host: its local store (when the store is
a directory) and gravfs's state directory (staging, cache, logs).

Their files change while gravfs runs, and gravfs reads and writes them by path. So
they are never data: an import leaves them out (as git leaves out .git), an export
does not write into them, and a mount point may not hide them from its own daemon.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlparse

from gravfs.store import local_path

S3_TOPS = ("_gravfs/", "data/", "sparse/")  # what a store keeps under its prefix


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


def s3_store_keys(store_url: str) -> Optional[tuple[str, tuple[str, ...]]]:
    """(bucket, key prefixes) of an S3 store's own objects; None for another store. Only
    these are the store's: data may share its bucket, or its prefix."""
    if not store_url.startswith("s3://"):
        return None
    p = urlparse(store_url)
    prefix = p.path.strip("/")
    base = prefix + "/" if prefix else ""
    return p.netloc, tuple(base + top for top in S3_TOPS)


def in_s3_store(store_url: str, bucket: str, key_prefix: str) -> bool:
    """Whether keys under ``s3://bucket/key_prefix`` are the S3 store's own."""
    own = s3_store_keys(store_url)
    return own is not None and own[0] == bucket and key_prefix.startswith(own[1])


def owner_of(store_url: str, state_dir: str, url: str) -> Optional[str]:
    """What of the repository's own ``url`` is in (a path, ``file://PATH``, or an
    ``s3://``, ``s3a://`` or ``s3n://`` prefix): "this repository's store (...)",
    "gravfs's state directory (...)"; None for a place that is not the repository's.
    Where an export or a table is written: never there."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme in ("s3", "s3a", "s3n"):
        bucket, _, key = url.split("://", 1)[1].partition("/")
        key = key.strip("/")
        if in_s3_store(store_url, bucket, key + "/" if key else ""):
            return f"this repository's store ({store_url})"
        return None
    if scheme not in ("", "file"):
        return None
    real = os.path.realpath(url[len("file://"):] if scheme else url)
    return next((what for base, what in own_dirs(store_url, state_dir) if within(real, base)),
                None)

