"""Object stores (local directory, S3) and the local disk tier in front of them."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from gravfs.errors import GravfsError
from gravfs.store.base import ObjectStore

__all__ = ["ObjectStore", "local_path", "open_store"]


def open_store(url: str) -> ObjectStore:
    """Open the store named by a URL: a plain path, ``file://path`` or ``s3://bucket/prefix``.

    For S3 the endpoint and credentials come from the environment
    (``GRAVFS_S3_ENDPOINT`` or ``AWS_ENDPOINT_URL``, and the AWS chain).
    Tests inject failures with ``GRAVFS_STORE_FAULT`` (gravfs/store/faulty.py).
    """
    store = _open(url)
    if os.environ.get("GRAVFS_STORE_FAULT"):
        from gravfs.store.faulty import faulty_from_env
        return faulty_from_env(store)
    return store


def local_path(url: str) -> str | None:
    """The directory of a local store (a plain path or ``file://PATH``); None when the
    URL names another kind of store."""
    if url.startswith("file://"):
        path = url[len("file://"):]
        if path.startswith("localhost/"):
            path = path[len("localhost"):]
        if not path:
            raise GravfsError(f"store URL {url!r} has no path")
        return path
    return None if "://" in url else url


def _open(url: str) -> ObjectStore:
    if not url:
        raise GravfsError("no store URL given (use a path, file://PATH or s3://BUCKET/PREFIX)")
    if url.startswith("file://"):
        from gravfs.store.local import LocalStore

        return LocalStore(local_path(url))
    if url.startswith("s3://"):
        from gravfs.store.s3 import S3Store

        parsed = urlparse(url)
        if "?" in url or "#" in url:  # urlparse would drop them, and the endpoint with them
            raise GravfsError(f"store URL {url!r} has a '?' or '#': an S3 store URL takes no "
                              "options (the endpoint comes from GRAVFS_S3_ENDPOINT, "
                              "AWS_ENDPOINT_URL or the mount option s3_endpoint)")
        if not parsed.netloc:
            raise GravfsError(f"store URL {url!r} has no bucket (expected s3://BUCKET/PREFIX)")
        return S3Store(parsed.netloc, parsed.path.strip("/"))
    scheme = url.split("://", 1)[0] if "://" in url else None
    if scheme is not None:
        raise GravfsError(f"unsupported store URL {url!r}: scheme {scheme!r} (use a path, file://PATH or s3://BUCKET/PREFIX)")
    from gravfs.store.local import LocalStore

    return LocalStore(url)
