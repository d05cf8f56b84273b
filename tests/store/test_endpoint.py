"""The S3 endpoint: where it is read from, and a value that is none refused there."""

from __future__ import annotations

import pytest

from gravfs.errors import GravfsError
from gravfs.store import open_store
from gravfs.store.endpoint import check_endpoint, resolve_endpoint


def test_given_then_gravfs_then_aws(monkeypatch):
    monkeypatch.setenv("GRAVFS_S3_ENDPOINT", "http://gravfs:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://aws:2")
    assert resolve_endpoint("https://given") == "https://given"
    assert resolve_endpoint() == "http://gravfs:1"
    monkeypatch.delenv("GRAVFS_S3_ENDPOINT")
    assert resolve_endpoint() == "http://aws:2"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert resolve_endpoint() is None


@pytest.mark.parametrize("bad, needle", [
    ("127.0.0.1:8333", "is not an endpoint URL"),  # boto3: an internal error
    ("not-a-url", "is not an endpoint URL"),
    ("ftp://host", "is not an endpoint URL"),
    ("http://host:port", "has a port that is not a number"),
])
def test_a_bad_endpoint_is_named_where_it_came_from(bad, needle, monkeypatch):
    with pytest.raises(GravfsError, match=needle):
        check_endpoint(bad, "x")
    for var in ("GRAVFS_S3_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv("GRAVFS_S3_ENDPOINT", raising=False)
        monkeypatch.setenv(var, bad)
        with pytest.raises(GravfsError, match=f"^{var} '{bad}' "):
            open_store("s3://b/p")
