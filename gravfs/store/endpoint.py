"""Which S3 endpoint a store talks to, and whether it is one.

boto3 takes any string and fails on the first request with a ValueError (an
internal error to the user), so a value that is not ``http(s)://HOST[:PORT]``
is refused where it is read, naming where it came from.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlparse

from gravfs.errors import GravfsError


def check_endpoint(url: str, where: str) -> str:
    """``url`` if it is http(s)://HOST[:PORT], else a GravfsError naming ``where``."""
    p = urlparse(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise GravfsError(f"{where} {url!r} is not an endpoint URL (expected "
                          "http://HOST:PORT or https://HOST)")
    try:
        p.port  # a port that is not a number raises
    except ValueError:
        raise GravfsError(f"{where} {url!r} has a port that is not a number") from None
    return url


def resolve_endpoint(given: Optional[str] = None) -> Optional[str]:
    """``given``, else GRAVFS_S3_ENDPOINT, else AWS_ENDPOINT_URL, else None (AWS)."""
    for where, url in (("the endpoint", given),
                       ("GRAVFS_S3_ENDPOINT", os.environ.get("GRAVFS_S3_ENDPOINT")),
                       ("AWS_ENDPOINT_URL", os.environ.get("AWS_ENDPOINT_URL"))):
        if url:
            return check_endpoint(url, where)
    return None
