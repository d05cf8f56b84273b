"""S3 outages: a stopped SeaweedFS gives StoreUnavailableError quickly; a restart heals."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gravfs.errors import StoreUnavailableError
from gravfs.store.tier import LocalTier


def test_outage_raises_unavailable_then_recovers(s3_server, tmp_path):
    store = s3_server.make_store(max_attempts=2, connect_timeout=1, read_timeout=5)
    store.put("k", b"v")
    _, version = store.read_versioned("k")
    src = tmp_path / "src"
    src.write_bytes(b"u" * 1000)
    ops = {
        "get": lambda: store.get("k"),
        "get_range": lambda: store.get_range("k", 0, 1),
        "download": lambda: store.download("k", str(tmp_path / "dl")),
        "put": lambda: store.put("k2", b"x"),
        "upload": lambda: store.upload("k3", str(src)),
        "put_if_absent": lambda: store.put_if_absent("k4", b"x"),
        "read_versioned": lambda: store.read_versioned("k"),
        "compare_and_swap": lambda: store.compare_and_swap("k", version, b"w"),
        "delete": lambda: store.delete("k"),
        "list": lambda: list(store.list("")),
        "size": lambda: store.size("k"),
        "tier": lambda: LocalTier(store, str(tmp_path / "cache")).acquire("data/ab/cd"),
    }
    s3_server.stop()
    try:
        for name, op in ops.items():
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError) as info:
                op()
            elapsed = time.monotonic() - t0
            print(f"{name}: gave up after {elapsed:.2f}s")
            assert elapsed < 10, f"{name} took {elapsed:.1f}s to give up"
            msg = str(info.value)
            assert "unavailable" in msg and s3_server.endpoint_url in msg, msg
    finally:
        s3_server.start()
    assert store.get("k") == b"v"
    assert store.compare_and_swap("k", version, b"w") != version
    store.put("k2", b"x")
    assert list(store.list("")) == ["k", "k2"]


def test_retries_ride_out_a_short_restart(s3_server):
    store = s3_server.make_store(max_attempts=10, connect_timeout=1)
    store.put("k", b"v")
    s3_server.stop()
    result: list = []
    # The read retries in a thread; the server is restarted from this (main)
    # thread, which outlives it (see s3server._child_setup).
    reader = threading.Thread(target=lambda: result.append(store.get("k")))
    t0 = time.monotonic()
    try:
        reader.start()
        time.sleep(0.5)
        assert reader.is_alive()  # still retrying while the server is down
    finally:
        s3_server.start()
    reader.join(timeout=90)
    assert result == [b"v"]  # botocore's backoff outlasted the restart
    assert time.monotonic() - t0 < 90


def test_hung_server_times_out_as_unavailable(s3_server):
    store = s3_server.make_store(max_attempts=2, connect_timeout=1, read_timeout=1)
    store.put("k", b"v")
    os.kill(s3_server.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailableError) as info:
            store.get("k")
        assert time.monotonic() - t0 < 15
        assert "timeout" in str(info.value).lower()
    finally:
        os.kill(s3_server.proc.pid, signal.SIGCONT)
    assert store.get("k") == b"v"


# --- deadlines: servers that accept and never answer, or stall mid-body -----------------

from tests.stall_server import SilentServer, StallingServer  # noqa: E402

FAKE_KEYS = dict(access_key="k", secret_key="s")
# The 2 s deadline plus at most one attempt's wait (connect 1 s + read 0.5 s) and a
# backoff sleep, with room for a loaded machine; without a deadline, 20 attempts of
# botocore's backoff (or a trickle that never ends) take minutes.
GIVE_UP_WITHIN = 15


def _outcome(fn, limit: float = 60.0):
    """(exception or result, seconds) of fn() run in a thread; fails if it outlives ``limit``.

    A thread, so that a test of a missing deadline fails instead of hanging: the
    server's close at teardown ends the abandoned call.
    """
    out: list = []

    def run():
        t0 = time.monotonic()
        try:
            res = fn()
        except BaseException as e:  # noqa: BLE001 - the outcome is what is tested
            res = e
        out.append((res, time.monotonic() - t0))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert out, f"still waiting after {limit:g} s: no deadline"
    return out[0]


@pytest.fixture
def short_timeouts(monkeypatch):
    """Small limits through the environment: connect 1 s, read 0.5 s, 20 attempts, 2 s per operation."""
    monkeypatch.setenv("GRAVFS_S3_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("GRAVFS_S3_READ_TIMEOUT", "0.5")
    monkeypatch.setenv("GRAVFS_S3_MAX_ATTEMPTS", "20")
    monkeypatch.setenv("GRAVFS_S3_TIMEOUT", "2")


def test_silent_server_every_operation_ends_at_its_deadline(short_timeouts, tmp_path):
    """20 attempts of 0.5 s reads plus backoff would take minutes: the 2 s deadline ends each call."""
    from gravfs.store.s3 import S3Store

    src = tmp_path / "src"
    src.write_bytes(b"u" * 1000)
    with SilentServer() as srv:
        store = S3Store("bucket", "p", endpoint_url=srv.url, **FAKE_KEYS)
        assert (store.timeouts.read, store.timeouts.operation, store.max_attempts) == (0.5, 2.0, 20)
        ops = {
            "get": lambda: store.get("k"),
            "get_range": lambda: store.get_range("k", 0, 10),
            "download": lambda: store.download("k", str(tmp_path / "dl")),
            "size": lambda: store.size("k"),
            "read": lambda: store.read_versioned("k"),
            "put": lambda: store.put("k", b"v"),
            "upload": lambda: store.upload("k", str(src)),
            "put_if_absent": lambda: store.put_if_absent("k", b"v"),
            "compare_and_swap": lambda: store.compare_and_swap("k", '"v1"', b"w"),
            "delete": lambda: store.delete("k"),
            "list": lambda: list(store.list("")),
            "tier": lambda: LocalTier(store, str(tmp_path / "cache")).acquire("data/ab/cd"),
        }
        for name, op in ops.items():
            err, elapsed = _outcome(op)
            print(f"{name}: {type(err).__name__} after {elapsed:.2f} s: {err}")
            assert isinstance(err, StoreUnavailableError), (name, err)
            msg = str(err)
            assert "timed out" in msg and "timed out after 2 s" in msg and srv.url in msg, msg
            assert "\n" not in msg
            assert elapsed < GIVE_UP_WITHIN, f"{name} gave up after {elapsed:.1f} s"


@pytest.mark.parametrize("mode", ["stall", "trickle"])
def test_body_that_stalls_or_trickles_is_cut_at_the_deadline(short_timeouts, tmp_path, mode):
    """Headers and 64 KiB of an 8 MiB object, then silence (each retry again), or a byte
    every 0.2 s (never a read timeout): every body read ends at its deadline."""
    from gravfs.store.s3 import S3Store

    with StallingServer(mode) as srv:
        store = S3Store("bucket", "p", endpoint_url=srv.url, **FAKE_KEYS)
        ops = {
            "get": lambda: store.get("k"),
            "get_range": lambda: store.get_range("k", 0, 4 << 20),
            "download": lambda: store.download("k", str(tmp_path / "dl")),
            "read": lambda: store.read_versioned("k"),
        }
        for name, op in ops.items():
            err, elapsed = _outcome(op)
            print(f"{mode} {name}: {type(err).__name__} after {elapsed:.2f} s: {err}")
            assert isinstance(err, StoreUnavailableError), (name, err)
            assert "timed out" in str(err) and srv.url in str(err), str(err)
            assert elapsed < GIVE_UP_WITHIN, f"{name} gave up after {elapsed:.1f} s"


def test_a_slow_steady_body_is_not_cut(monkeypatch, tmp_path):
    """Each MiB received renews the deadline: 6 MiB at ~1.25 MiB/s (about 5 s) with a 4 s deadline."""
    from gravfs.store.s3 import S3Store

    monkeypatch.setenv("GRAVFS_S3_TIMEOUT", "4")
    monkeypatch.setenv("GRAVFS_S3_READ_TIMEOUT", "3")
    size = 6 << 20
    with StallingServer("slow", size=size, interval=0.2, step=256 << 10) as srv:
        store = S3Store("bucket", "p", endpoint_url=srv.url, **FAKE_KEYS)
        n, elapsed = _outcome(lambda: store.download("k", str(tmp_path / "dl")))
        assert n == size, n
        assert elapsed > 4  # longer than one deadline: renewed, not cut
        data, elapsed = _outcome(lambda: store.get("k"))
        assert len(data) == size and elapsed > 4


def test_bad_timeout_settings_are_one_line_errors(monkeypatch):
    from gravfs.errors import GravfsError
    from gravfs.store.s3 import S3Store

    monkeypatch.setenv("GRAVFS_S3_TIMEOUT", "soon")
    with pytest.raises(GravfsError, match=r"GRAVFS_S3_TIMEOUT='soon': not a number"):
        S3Store("bucket", endpoint_url="http://127.0.0.1:1", **FAKE_KEYS)
    monkeypatch.setenv("GRAVFS_S3_TIMEOUT", "0")
    with pytest.raises(GravfsError, match="must be positive"):
        S3Store("bucket", endpoint_url="http://127.0.0.1:1", **FAKE_KEYS)


def test_cli_on_a_silent_endpoint_prints_one_line_and_fails(tmp_path):
    """`gravfs ls main` against an endpoint that never answers: one line naming it, non-zero exit."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with SilentServer() as srv:
        env = dict(os.environ, GRAVFS_S3_ENDPOINT=srv.url, AWS_ACCESS_KEY_ID="k",
                   AWS_SECRET_ACCESS_KEY="s", AWS_DEFAULT_REGION="us-east-1",
                   GRAVFS_S3_CONNECT_TIMEOUT="1", GRAVFS_S3_READ_TIMEOUT="0.5",
                   GRAVFS_S3_MAX_ATTEMPTS="20", GRAVFS_S3_TIMEOUT="2",
                   PYTHONPATH=root)
        env.pop("GRAVFS_DEBUG", None)
        res = subprocess.run([sys.executable, "-m", "gravfs.cli", "-s", "s3://bucket/repo",
                              "--state-dir", str(tmp_path / "state"), "ls", "main"],
                             capture_output=True, text=True, env=env, timeout=90, cwd=root)
    print(res.stderr)
    assert res.returncode == 8  # StoreUnavailableError
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert srv.url in lines[0] and "timed out" in lines[0] and "s3://bucket/repo" in lines[0], lines[0]
    assert res.stdout == ""


def test_mount_answers_eio_with_a_log_line_when_the_store_hangs(s3_server, tmp_path):
    """A mount whose S3 endpoint starts to accept and never answer (a proxy in front of
    SeaweedFS): a read fails with EIO at the deadline set by mount options, the log says
    which call timed out, and the mount serves the file once the endpoint answers again."""
    import errno
    import urllib.parse
    import uuid

    from tests.fuse_util import Mount, fuse_available, s3_env
    from tests.stall_server import Proxy

    if not fuse_available():
        pytest.fail("/dev/fuse is not usable: this test needs a real FUSE mount")
    if s3_server.proc is None or s3_server.proc.poll() is not None:
        s3_server.start()
    url = f"s3://{s3_server.bucket}/hang-{uuid.uuid4().hex[:10]}"
    up = urllib.parse.urlparse(s3_server.endpoint_url)
    with Proxy((up.hostname, up.port)) as proxy:
        env = dict(s3_env(s3_server), GRAVFS_S3_ENDPOINT=proxy.url, AWS_ENDPOINT_URL=proxy.url)
        a = Mount(str(tmp_path / "a"), store=url, env=env).init()
        src = tmp_path / "f"
        src.write_bytes(b"through the proxy")
        a.cli("put", str(src), "main:d/f")
        cid = a.commit()
        b = Mount(str(tmp_path / "b"), store=url, env=env)  # nothing cached in this workspace
        try:
            b.mount(options=["s3_timeout=3,s3_read_timeout=1,s3_connect_timeout=1,s3_max_attempts=20"])
            target = b.path("commits", cid, "d", "f")
            assert os.stat(target).st_size == 17  # its metadata is read; its data is not
            proxy.hang()
            err, elapsed = _outcome(lambda: open(target, "rb").read(), limit=120)
            print(f"read: {err!r} after {elapsed:.1f} s")
            assert isinstance(err, OSError) and err.errno == errno.EIO, err
            lines = [l for l in b.log_text().splitlines() if " ERROR " in l and "timed out after 3 s" in l]
            assert lines and proxy.url in lines[0], b.log_tail()
            print(lines[0])
            proxy.resume()
            with open(target, "rb") as f:
                assert f.read() == b"through the proxy"
            assert "Traceback" not in b.log_text()
        finally:
            proxy.resume()
            b.cleanup()
            a.cleanup()
