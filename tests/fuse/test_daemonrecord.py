"""A daemon's record and the test of a killed one (gravfs.fuse.daemonrecord); the hung
mount itself is in test_launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from gravfs.fuse import daemonrecord
from gravfs.fuse.daemonrecord import (dying, process_state, recorded_daemon, record_path,
                                      start_time)

MNT = "/mnt/lake data"


def _record(state_dir: str, **fields) -> None:
    path = record_path(state_dir, MNT)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(fields, f)


def test_a_record_names_this_process_and_goes_with_it(tmp_path):
    state = str(tmp_path)
    daemonrecord.write_record(state, MNT, "0:77")
    path = record_path(state, MNT)
    assert os.path.basename(path) == "mount-mnt_lake_data.json"
    assert oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700"
    with open(path) as f:
        assert json.load(f) == {"pid": os.getpid(), "start": start_time(os.getpid()),
                                "device": "0:77"}
    # a live process that is not dying: never aborted, whatever its mount does
    assert recorded_daemon(state, MNT, "0:77") == (os.getpid(), "running")
    daemonrecord.drop_record(state, MNT)
    assert not os.path.exists(path)


def test_a_newer_daemons_record_is_not_dropped(tmp_path):
    state = str(tmp_path)
    _record(state, pid=os.getpid() + 1, start=1, device="0:77")
    daemonrecord.drop_record(state, MNT)
    assert os.path.exists(record_path(state, MNT))


def test_a_gone_or_reused_pid_counts_as_killed(tmp_path):
    state = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    _record(state, pid=proc.pid, start=12345, device="0:77")
    assert recorded_daemon(state, MNT, "0:77") == (proc.pid, "killed")
    # this process under another start time: the pid was reused, the daemon is gone
    _record(state, pid=os.getpid(), start=start_time(os.getpid()) - 1, device="0:77")
    assert recorded_daemon(state, MNT, "0:77") == (os.getpid(), "killed")


def test_no_record_another_mount_or_a_bad_record_is_not_killed(tmp_path):
    state = str(tmp_path)
    assert recorded_daemon(state, MNT, "0:77") is None
    _record(state, pid=1 << 30, start=1, device="0:78")  # the record of an older mount
    assert recorded_daemon(state, MNT, "0:77") is None
    assert recorded_daemon(state, MNT, None) is None
    with open(record_path(state, MNT), "w") as f:
        f.write("{not json")
    assert recorded_daemon(state, MNT, "0:77") is None
    _record(state, pid="12", start=1, device="0:77")
    assert recorded_daemon(state, MNT, "0:77") is None


def test_a_zombie_is_killed_a_stopped_process_is_not(tmp_path):
    state = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _record(state, pid=proc.pid, start=start_time(proc.pid), device="0:77")
        assert not dying(proc.pid)
        assert recorded_daemon(state, MNT, "0:77") == (proc.pid, "running")
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(proc.pid) != "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not dying(proc.pid)  # stopped on purpose: it may go on
        assert recorded_daemon(state, MNT, "0:77") == (proc.pid, "stopped")
        os.kill(proc.pid, signal.SIGKILL)
        while process_state(proc.pid) != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert dying(proc.pid)  # not reaped yet
        assert recorded_daemon(state, MNT, "0:77") == (proc.pid, "killed")
    finally:
        proc.kill()
        proc.wait()
    assert dying(proc.pid) and process_state(proc.pid) is None  # gone

