"""What a mount's daemon records about itself, so that a later ``gravfs mount`` or
``umount`` can tell a daemon that was killed and cannot exit from one that is slow.

A daemon killed (kill -9, the OOM killer) while one of its threads waits in the kernel
on its own mount (the watcher's invalidation, on a directory or a page that a request
it will never answer holds) cannot finish dying: that thread keeps the process, and so
its /dev/fuse descriptor, and every process using the mount waits for good. Such a
daemon is recognisable in /proc (a zombie main thread, SIGKILL pending), and aborting
its connection loses nothing a kill -9 had not already lost. A daemon that is merely
stopped or slow shows neither and is left alone. The record (``<state dir>/run/
mount-<name>.json``: pid, the process's start time, the mount's device) ties the hung
mount to its process: pids are reused, and so are mount devices.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Optional

from gravfs.store.modes import private_dir

log = logging.getLogger(__name__)

SIGKILL_BIT = 1 << 8  # SIGKILL (9) in /proc/<pid>/status's pending-signal masks


def mount_name(mountpoint: str) -> str:
    """A file name for a mount point (its log, its record)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", mountpoint.strip("/")) or "root"


def record_path(state_dir: str, mountpoint: str) -> str:
    return os.path.join(state_dir, "run", f"mount-{mount_name(mountpoint)}.json")


def _stat_fields(pid: int) -> Optional[list[str]]:
    """/proc/PID/stat's fields after the command name (state first); None: no such
    process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (None: no such process);
    with the pid, it names one process for good."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def process_state(pid: int) -> Optional[str]:
    """The process's state letter (R, S, D, T, Z, ...); None: no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def write_record(state_dir: str, mountpoint: str, device: Optional[str]) -> None:
    """Record this process as the daemon of the mount on ``device``; best effort (the
    mount works without it, only a hung kill then needs ``umount --force``)."""
    path = record_path(state_dir, mountpoint)
    pid = os.getpid()
    try:
        private_dir(os.path.dirname(path))
        tmp = f"{path}.{pid}.tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": pid, "start": start_time(pid), "device": device}, f)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot record the daemon's pid in %s: %s", path, exc)


def drop_record(state_dir: str, mountpoint: str) -> None:
    """Remove the record if it is still this process's (a newer daemon may own it)."""
    path = record_path(state_dir, mountpoint)
    record = read_record(path)
    if record is not None and record.get("pid") == os.getpid():
        try:
            os.unlink(path)
        except OSError:
            pass


def read_record(path: str) -> Optional[dict]:
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def recorded_daemon(state_dir: str, mountpoint: str,
                    device: Optional[str]) -> Optional[tuple[int, str]]:
    """The daemon of the mount on ``device``, from its record, and what it is:
    ``killed`` (killed and cannot exit, or gone: nothing will answer), ``stopped``
    (SIGSTOP, Ctrl-Z: it goes on when continued) or ``running``. None without a record
    of that mount."""
    record = read_record(record_path(state_dir, mountpoint))
    if record is None or device is None or record.get("device") != device:
        return None
    pid = record.get("pid")
    if not isinstance(pid, int):
        return None
    if start_time(pid) != record.get("start"):
        return pid, "killed"  # gone (the pid unused, or another process's now)
    if dying(pid):
        return pid, "killed"
    return pid, "stopped" if process_state(pid) in ("T", "t") else "running"


def dying(pid: int) -> bool:
    """The process was killed and has not finished exiting: its main thread is a
    zombie, or a thread has SIGKILL pending (a stopped process shows neither)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue  # that thread has just exited
        if int(tid) == pid and fields.get("State", "").strip().startswith("Z"):
            return True
        for mask in ("SigPnd", "ShdPnd"):
            try:
                if int(fields.get(mask, "0").strip(), 16) & SIGKILL_BIT:
                    return True
            except ValueError:
                pass
    return False
