"""gravfs.store.s3: what only the S3 store does, against the real server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from gravfs.errors import StoreUnavailableError
from gravfs.store.s3 import S3Store
from tests.stall_server import WebServer

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


@pytest.mark.parametrize("status,page", [(200, True), (403, True), (404, True), (404, False)])
def test_a_web_server_in_s3s_place_is_said_never_taken_for_an_empty_store(tmp_path, status, page):
    """A wrong port, a web server or a proxy answering for the endpoint: a bare 404 was
    "not found" (a mount would take every branch for deleted, `status` said "run
    'gravfs init'"), a 200 page a PUT without an ETag (an internal error) or an empty
    listing, a 403 page "failed: : ". (A 200 page to a GET is a body like any other:
    servers such as SeaweedFS answer a stored page as text/html; the settings file
    that does not parse then says what it begins with.)"""
    with WebServer(status, page) as web:
        store = S3Store("bucket", "repo", endpoint_url=web.url, access_key="k",
                        secret_key="s", max_attempts=1)
        src = tmp_path / "f"
        src.write_bytes(b"x" * 10)
        reads = [("get", lambda: store.get("_gravfs/repo.json")),
                 ("get_range", lambda: store.get_range("data/ab/x", 0, 5)),
                 ("read", lambda: store.read_versioned("_gravfs/refs/heads/main")),
                 ("download", lambda: store.download("data/ab/x", str(tmp_path / "d")))]
        writes = [("list", lambda: list(store.list("data/"))),
                  ("list", lambda: list(store.list_info("data/"))),
                  ("put", lambda: store.put("data/ab/x", b"x")),
                  ("put", lambda: store.upload("data/ab/x", str(src))),
                  ("compare_and_swap",
                   lambda: store.compare_and_swap("_gravfs/refs/heads/main", None, b"{}"))]
        for name, op in ([] if status == 200 else reads) + writes:
            with pytest.raises(StoreUnavailableError) as got:
                op()
            assert "which no S3 server sends" in str(got.value) and web.url in str(got.value), (name, got.value)
            assert f" {name} " in str(got.value), (name, got.value)
        if status == 404:  # a HEAD has no body to tell by: a bare 404 is S3's own "no such key"
            assert store.size("data/ab/x") is None


@pytest.mark.parametrize("status,page,code,said", [
    (404, False, 8, "which no S3 server sends"),
    (200, True, 7, "repository settings do not parse (they begin b'<!DOCTYPE html><html>"),
])
def test_the_cli_says_a_web_server_answered(tmp_path, status, page, code, said):
    """`gravfs status main` on an endpoint that is a web server: one line saying so."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with WebServer(status, page) as web:
        env = dict(os.environ, GRAVFS_S3_ENDPOINT=web.url, AWS_ACCESS_KEY_ID="k",
                   AWS_SECRET_ACCESS_KEY="s", PYTHONPATH=root)
        env.pop("GRAVFS_DEBUG", None)
        res = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", "s3://bucket/repo",
                              "--state-dir", str(tmp_path / "state"), "status", "main"],
                             capture_output=True, text=True, env=env, timeout=90, cwd=root)
    assert res.returncode == code, res.stderr  # not "no repository" (exit 2)
    assert res.stderr.count("\n") == 1 and said in res.stderr, res.stderr
    assert "gravfs init" not in res.stderr


def test_a_stored_page_reads_back(s3_store):
    """SeaweedFS answers an object put without a content type with the one it sniffs
    (text/html for a page a lake holds): a body like any other, never "not S3"."""
    page = b"<!DOCTYPE html><html><body>a report</body></html>\n"
    s3_store.put("data/ab/page", page)
    assert s3_store.get("data/ab/page") == page
    assert s3_store.get_range("data/ab/page", 0, 9) == page[:9]
