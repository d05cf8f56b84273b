"""gravfs.store.s3: what only the S3 store does, against the real server."""

from __future__ import annotations

import uuid

import pytest

from gravfs.errors import StoreUnavailableError
from gravfs.store.s3 import S3Store

pytestmark = pytest.mark.s3


def test_a_bucket_that_does_not_exist_is_unavailable_not_an_empty_store(s3_server):
    """A deleted bucket (or a typo) answers NoSuchBucket: were that 'not found', a mount
    would take every branch for deleted, as for a missing ref."""
    server = s3_server.ensure_running()
    store = S3Store(f"gone-{uuid.uuid4().hex[:12]}", "repo", endpoint_url=server.endpoint_url,
                    access_key=server.access_key, secret_key=server.secret_key, max_attempts=1)
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        store.get("_gravfs/refs/heads/main")
    # (a write is not tried: SeaweedFS makes a bucket on its first PUT, AWS refuses)
