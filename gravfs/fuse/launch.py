"""``gravfs mount`` / ``gravfs umount``: the daemon's life cycle.

mount: parse options, fork (twice, with setsid) unless --foreground, and in
the daemon open the repository, mount with pyfuse3 and only then tell the
waiting parent "ready" through a pipe, so ``gravfs mount`` returns once the
mount can be used (or fails with the daemon's one-line error). A daemon logs
to ``<state dir>/logs/mount-<name>.log``. SIGTERM/SIGINT unmount cleanly;
on unmount every modified open file is staged and the pending uploads are
uploaded before the process exits.

umount: ask the daemon for its pid (a virtual xattr on the mount root; a daemon
that does not answer is reported, and ``--force`` aborts its connection; one that
was killed and cannot exit, which the record it left in ``<state dir>/run`` shows,
has its connection aborted by mount and umount themselves), run
``fusermount3 -u`` and wait for the daemon to finish flushing and exit; then
report (and exit 1 for) the files the daemon could not stage and saved in
lost+found, which it lists in its exit report.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import logging.handlers
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from typing import Optional

from gravfs.version.config import default_state_dir
from gravfs.errors import GravfsError, NotFoundError
from gravfs.fuse import daemonrecord, kernel
from gravfs.fuse.holders import mount_users
from gravfs.fuse import options as mount_options
from gravfs.fs.ownpaths import own_dirs, within
from gravfs import logtail
from gravfs.loglevel import env_log_level
from gravfs.mounts import mount_at
from gravfs.store import local_path
from gravfs.store.modes import private_dir

log = logging.getLogger(__name__)

READY = b"OK\n"
UMOUNT_WAIT = 600.0
UMOUNT_TELL, UMOUNT_TELL_EVERY = 3.0, 30.0  # seconds before umount says it waits, and between
UPLOAD_WORKERS = 4
SYNC_INTERVAL = 1.0
# Seconds a mount's daemon has to answer an xattr request before gravfs mount and
# umount call it hung ($GRAVFS_MOUNT_PROBE_WAIT)
PROBE_WAIT = 10.0
# seconds a signal's unmount waits for the watcher's invalidation in flight (see _signals)
QUIET_WAIT = 10.0


class DaemonHung(GravfsError):
    """A mounted gravfs daemon does not answer; names the way out."""


# -- mount ------------------------------------------------------------------------------


def mount(args) -> int:
    opts = mount_options.parse(getattr(args, "options", None) or [])
    store = args.store or opts.store or os.environ.get("GRAVFS_STORE")
    if not store:
        raise GravfsError("no store given: use -s/--store URL, -o store=URL or set GRAVFS_STORE")
    if "://" not in store:
        store = os.path.abspath(store)  # the daemon runs from /
    state_dir = os.path.abspath(args.state_dir or opts.state_dir or default_state_dir())
    if opts.log_file:
        opts = dataclasses.replace(opts, log_file=_writable_log(opts.log_file))
    branch = getattr(args, "branch", None) or opts.branch
    if opts.s3_endpoint:
        os.environ["GRAVFS_S3_ENDPOINT"] = opts.s3_endpoint
    for name in ("s3_connect_timeout", "s3_read_timeout", "s3_timeout", "s3_max_attempts"):
        if getattr(opts, name) is not None:  # read by the daemon's S3Store
            os.environ["GRAVFS_" + name.upper()] = str(getattr(opts, name))
    mountpoint = mount_path(args.mountpoint)
    _clear_stale_mount(mountpoint, state_dir)
    if not os.path.isdir(mountpoint):
        if not os.path.lexists(mountpoint):
            raise NotFoundError(f"mount point {mountpoint}: no such directory (create it "
                                "first, as for any mount)")
        raise GravfsError(f"mount point {mountpoint} is not a directory")
    if os.path.ismount(mountpoint):
        raise GravfsError(f"{mountpoint} is already a mount point")
    _check_hides_nothing(mountpoint, store, state_dir)
    if not opts.nonempty:
        _check_empty(mountpoint)
    verbose = getattr(args, "verbose", 0) or 0
    cfg = dict(store=store, state_dir=state_dir, branch=branch, mountpoint=mountpoint,
               opts=opts, verbose=verbose)
    if getattr(args, "foreground", False):
        return serve(cfg, ready_fd=None, daemon=False)
    return _spawn(cfg)


FSTYPE = "fuse.gravfs"  # the daemon mounts with subtype=gravfs


def mount_path(path: str) -> str:
    """The path the kernel lists a mount at (mountinfo), for a mount point named through
    symlinks or '..'. Only directories above it and symlinks are looked at, never the mount
    point itself: a stat there would wait on a daemon that no longer answers."""
    p = os.path.abspath(path)
    for _ in range(40):  # as the kernel's limit on nested links
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        try:
            target = os.readlink(p)  # a directory (or a mount on one) is EINVAL: no request
        except OSError:
            return p
        p = os.path.abspath(os.path.join(os.path.dirname(p), target))
    return p


def _check_hides_nothing(mountpoint: str, store: str, state_dir: str) -> None:
    """Refuse a mount point that holds the local store or the state directory: its daemon
    opens files there by path as it runs, and would find its own mount instead
    (branches then look empty and every write fails)."""
    mp = os.path.realpath(mountpoint)
    for real, what in own_dirs(store, state_dir):
        if within(real, mp):
            raise GravfsError(f"cannot mount on {mountpoint}: {what} is "
                              f"{'there' if real == mp else 'under it'}, and the mount would "
                              "hide it from its own daemon; mount on another directory")
    store_dir = local_path(store)
    if store_dir is not None and within(mp, os.path.realpath(store_dir)):
        raise GravfsError(f"cannot mount on {mountpoint}: it is inside this repository's "
                          f"store ({store_dir}), whose walks and listings would go through "
                          "the mount; mount on another directory")


def _check_empty(mountpoint: str) -> None:
    """Refuse a mount point that holds files: the mount hides them until it goes, and
    a user who mounted on the wrong directory takes them for lost (-o nonempty: on
    purpose). A directory we may not list is left to the mount to judge."""
    try:
        with os.scandir(mountpoint) as it:
            names = [e.name for _, e in zip(range(4), it)]
    except OSError:
        return
    if names:
        shown = ", ".join(repr(n) for n in sorted(names[:3]))
        raise GravfsError(f"cannot mount on {mountpoint}: it is not empty (it holds {shown}"
                          f"{' and more' if len(names) > 3 else ''}), and the mount would "
                          "hide what it holds; mount on an empty directory, or add -o nonempty")


def _mount_device(mountpoint: str) -> Optional[str]:
    """The "major:minor" of what is mounted at mountpoint (mountinfo: no FUSE request)."""
    m = mount_at(mountpoint)
    return m.device if m is not None else None


def _mount_type(mountpoint: str) -> Optional[str]:
    """The filesystem type mounted at mountpoint (FSTYPE for gravfs's), or None."""
    m = mount_at(mountpoint)
    return m.fstype if m is not None else None


def _mounted_at(mountpoint: str) -> bool:
    return mount_at(mountpoint) is not None


def _gravfs_mount(mountpoint: str) -> None:
    """Refuse to unmount what gravfs did not mount: run as root, fusermount would
    unmount any filesystem (a data disk, a tmpfs) named by mistake."""
    kind = _mount_type(mountpoint)
    if kind is None:
        raise GravfsError(f"{mountpoint} is not mounted")
    if kind != FSTYPE:
        raise GravfsError(f"{mountpoint} is not a gravfs mount (it is {kind}): left mounted")


def tune_readahead(mountpoint: str, kb: int) -> None:
    """Raise the kernel's read-ahead for the mount (root only; best effort)."""
    if kb <= 0:
        return
    dev = _mount_device(mountpoint)
    if dev is None:
        return
    try:
        with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as f:
            f.write(str(kb))
        log.debug("read-ahead of %s set to %d KiB", mountpoint, kb)
    except OSError as exc:
        log.debug("cannot set read-ahead of %s: %s", mountpoint, exc)


def _clear_stale_mount(mountpoint: str, state_dir: str) -> None:
    """A daemon that died (kill -9, crash) leaves a dead mount: unmount it lazily
    (only gravfs's: another filesystem there is the user's to deal with). One killed
    while a thread of it waited on the mount cannot exit: its connection is aborted
    first (_abort_killed)."""
    if _mount_type(mountpoint) != FSTYPE:
        return
    try:
        _ask_pid(mountpoint)
        return
    except DaemonHung as hung:
        _abort_killed(mountpoint, state_dir, hung)
        return
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            return
    log.warning("%s is a dead gravfs mount (its daemon is gone); unmounting it", mountpoint)
    _lazy_unmount(mountpoint)


def _abort_killed(mountpoint: str, state_dir: str, hung: DaemonHung) -> None:
    """A mount whose daemon does not answer: if it was killed and cannot exit
    (gravfs.fuse.daemonrecord), abort its connection and unmount it, what umount
    --force does, done only when nothing could answer any more; otherwise raise
    ``hung``, naming the daemon when its record shows it stopped."""
    daemon = daemonrecord.recorded_daemon(state_dir, mountpoint, _mount_device(mountpoint))
    if daemon is None or daemon[1] == "running":
        raise hung
    pid, what = daemon
    if what == "stopped":
        raise DaemonHung(
            f"{mountpoint} is a gravfs mount whose daemon (pid {pid}) is stopped (SIGSTOP, "
            f"or Ctrl-Z on a foreground mount): 'kill -CONT {pid}' resumes it; 'gravfs "
            f"umount --force {mountpoint}' aborts its connection instead (the processes "
            "waiting on it get an error, and what was written and not closed is lost)")
    log.warning("%s: its daemon (pid %d) was killed and cannot exit (a thread of it waits "
                "on the mount); aborting the connection (the processes waiting on it get "
                "an error) and unmounting it", mountpoint, pid)
    _abort_connection(mountpoint)
    _lazy_unmount(mountpoint)


def _lazy_unmount(mountpoint: str) -> None:
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    subprocess.run([tool, "-u", "-z", mountpoint] if tool else ["umount", "-l", mountpoint],
                   capture_output=True)


def _probe_wait() -> float:
    try:
        return float(os.environ.get("GRAVFS_MOUNT_PROBE_WAIT", PROBE_WAIT))
    except ValueError:
        return PROBE_WAIT


def _ask_pid(mountpoint: str) -> int:
    """The pid the mount's daemon answers with (an xattr of the root, never cached by
    the kernel), asked from a thread: a daemon that stopped reading requests (stopped,
    or killed while one of its threads waits in the kernel: it cannot exit then, nor
    close the connection) would hold the caller forever. OSError as the request
    failed (ENOTCONN: the daemon is gone); DaemonHung when it gets no answer."""
    answer: list = []

    def ask() -> None:
        try:
            answer.append(int(os.getxattr(mountpoint, "user.gravfs.pid")))
        except (OSError, ValueError) as exc:
            answer.append(exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc)))

    wait = _probe_wait()
    asker = threading.Thread(target=ask, name="mount-probe", daemon=True)
    asker.start()
    asker.join(wait)
    if not answer:
        raise DaemonHung(
            f"{mountpoint} is a gravfs mount whose daemon does not answer (for {wait:g} s); "
            f"if the daemon is dead (kill -9, out of memory), 'gravfs umount --force "
            f"{mountpoint}' aborts its connection: the processes waiting on it get an error, "
            "and what was written and not closed is lost")
    if isinstance(answer[0], OSError):
        raise answer[0]
    return answer[0]


def _spawn(cfg: dict) -> int:
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # (None: closed at start, mount.gravfs's)
        if stream is not None:
            stream.flush()
    pid = os.fork()
    if pid == 0:  # child: detach, fork again, and serve from the grandchild
        code = 1
        try:
            os.close(r)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.chdir("/")  # do not keep the caller's directory busy
            code = serve(cfg, ready_fd=w, daemon=True)
        except BaseException as exc:  # never return into the CLI from a forked child
            try:
                os.write(w, f"ERR 1 {exc}\n".encode())
            except OSError:
                pass
        finally:
            os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    chunks = []
    while True:
        buf = os.read(r, 4096)
        if not buf:
            break
        chunks.append(buf)
        if READY in b"".join(chunks):
            break
    os.close(r)
    msg = b"".join(chunks)
    if msg.startswith(READY):
        return 0
    text = msg.decode(errors="replace").strip()
    m = re.match(r"ERR (\d+) (.*)", text, re.S)
    if m:
        raise _Reported(m.group(2), int(m.group(1)))
    raise GravfsError("the mount daemon exited before the mount was ready"
                      f" (see the log in {cfg['state_dir']}/logs)")


class _Reported(GravfsError):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.exit_code = code


def log_path(state_dir: str, mountpoint: str) -> str:
    return os.path.join(state_dir, "logs", f"mount-{daemonrecord.mount_name(mountpoint)}.log")


def _writable_log(path: str) -> str:
    """``-o log_file`` made absolute (the daemon runs from /) and opened here, where a
    failure can still be said plainly: the daemon's own try said "[Errno 2] No such
    file or directory: ''" for a name without a directory."""
    path = os.path.abspath(path)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))
    except OSError as exc:
        raise GravfsError(f"cannot write the log file {path} (-o log_file): "
                          f"{exc.strerror or exc}") from None
    return path


def _daemon_log(cfg: dict) -> str:
    """Where a mount's daemon logs (and its descriptor 2 goes): ``-o log_file`` or the
    state dir's."""
    return cfg["opts"].log_file or log_path(cfg["state_dir"], cfg["mountpoint"])


def fuse_said(path: str, start: int) -> str:
    """The last line libfuse or fusermount3 wrote to a daemon's log (its stderr) from
    ``start`` on: why a mount failed, in their words (fusermount3's "option allow_other
    only allowed if 'user_allow_other' is set in /etc/fuse.conf" was behind "see the log")."""
    said = [line.strip() for line in logtail.lines_since(path, start)
            if line.startswith(("fusermount3:", "fuse:"))]
    return said[-1] if said else ""


LOG_BYTES = 32 << 20  # a daemon's log file is rotated past this size,
LOG_KEPT = 4  # keeping this many earlier ones (.1 the newest)


class _DaemonLog(logging.handlers.RotatingFileHandler):
    """The daemon's log file; with ``stderr``, file descriptor 2 follows it to each new
    file (libfuse's own messages, a crash's traceback go there too)."""

    def __init__(self, path: str, stderr: bool):
        super().__init__(path, maxBytes=LOG_BYTES, backupCount=LOG_KEPT)
        self.stderr = stderr

    def doRollover(self) -> None:
        super().doRollover()
        if self.stderr and self.stream is not None:
            os.dup2(self.stream.fileno(), 2)


def log_handler(path: str, stderr: bool = False) -> logging.Handler:
    """The daemon's log file, rotated: a mount runs for months, and a program retrying
    a read that fails logs an error a request (a gigabyte an hour, on the state dir's
    disk, which staging needs)."""
    handler = _DaemonLog(path, stderr)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    return handler


def _setup_daemon_logging(cfg: dict, daemon: bool) -> None:
    opts = cfg["opts"]
    level = logging.DEBUG if opts.debug or cfg["verbose"] >= 2 else logging.INFO
    level = env_log_level(level, say=False)  # (its command, gravfs mount, said it)
    root = logging.getLogger()
    if daemon:
        path = _daemon_log(cfg)
        if opts.log_file:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        else:
            private_dir(os.path.dirname(path))  # <state dir>/logs, tightened if an older one is open
        for h in list(root.handlers):
            root.removeHandler(h)
        root.addHandler(log_handler(path, stderr=True))
        # stdio: nothing from the terminal; libfuse's own messages go to the log
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
    elif not root.handlers:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root.setLevel(level)
    if not opts.debug:
        logging.getLogger("pyfuse3").setLevel(logging.INFO)
        for noisy in ("botocore", "boto3", "urllib3", "s3transfer"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def serve(cfg: dict, ready_fd: Optional[int], daemon: bool) -> int:
    """Open, mount, serve until unmounted; returns the exit code."""
    os.umask(0o077)  # what the daemon writes (logs, local files) is its owner's only
    _setup_daemon_logging(cfg, daemon)
    from gravfs.version.committed.reader import raise_fd_limit

    log.info("open-file limit %d: files open through the mount, open ranges (a quarter) "
             "and the daemon's own share it", raise_fd_limit())
    _reserve_descriptors()  # before any thread starts

    def report(code: int, message: str, level: int = logging.ERROR) -> int:
        log.log(level, "mount failed: %s", message)
        if ready_fd is not None:
            try:
                os.write(ready_fd, f"ERR {code} {message}\n".encode())
                os.close(ready_fd)
            except OSError:
                pass
        else:
            print(f"gravfs: {message}", file=sys.stderr)
        return code

    import pyfuse3

    from gravfs.fuse.operations import GravfsOperations
    from gravfs.fuse.warmer import RangeWarmer
    from gravfs.fs.repository import Repository

    opts = cfg["opts"]
    try:
        # branch heads are cached briefly; the watcher refreshes them every poll
        # staging commits skip fsync (synced on fsync and every second, see _sync_loop)
        repo = Repository.open(cfg["store"], cfg["state_dir"], head_ttl=opts.head_ttl,
                               staging_sync=False)
    except GravfsError as exc:
        return report(exc.exit_code, str(exc))
    if opts.meta_cache_mb is not None:
        from gravfs.sstable import DEFAULT_CACHE
        DEFAULT_CACHE.set_capacity(opts.meta_cache_mb << 20)
        log.info("metadata block cache: %d MiB", opts.meta_cache_mb)
    if not opts.read_only:  # write-back of closed files; drains what a dead daemon left
        try:
            repo.data.start_uploader(UPLOAD_WORKERS)
        except GravfsError as exc:  # a garbage collection holds writers off
            repo.close()
            return report(exc.exit_code, str(exc))
    settings = dataclasses.replace(opts, branch=cfg["branch"], mountpoint=cfg["mountpoint"])
    try:
        ops = GravfsOperations(repo, settings)
        ops.prepare(_files_dir(repo))
    except GravfsError as exc:
        repo.close()
        return report(exc.exit_code, str(exc))
    fuse_opts = set(opts.fuse)
    fuse_opts.add(f"fsname=gravfs:{_short_url(cfg['store'])}")
    fuse_opts.add("subtype=gravfs")
    if opts.debug:
        fuse_opts.add("debug")
    stop = StopSignals()  # from the mount on, a stop signal unmounts cleanly
    logged = logtail.size(_daemon_log(cfg)) if daemon else 0
    try:
        pyfuse3.init(ops, cfg["mountpoint"], fuse_opts)
    except Exception as exc:
        repo.close()
        if not daemon:  # libfuse's or fusermount3's own line is on the terminal, above
            return report(1, f"cannot mount on {cfg['mountpoint']}: {exc}")
        return report(1, f"cannot mount on {cfg['mountpoint']}: "
                         f"{fuse_said(_daemon_log(cfg), logged) or exc} "
                         f"(see {_daemon_log(cfg)})")
    state = {"ready": False}
    if not opts.read_only:  # mounted: empty local-copy files from now on
        ops.local.start()
    warmer = RangeWarmer(repo, cfg["branch"] or repo.settings.default_branch, opts.warm_ranges)

    def announce() -> None:
        """The mount answered a request of ours: tell the waiting parent / systemd."""
        state["ready"] = True
        log.info("mounted %s on %s (pid %d%s)", cfg["store"], cfg["mountpoint"], os.getpid(),
                 f", branch {cfg['branch']}" if cfg["branch"] else "")
        daemonrecord.write_record(cfg["state_dir"], cfg["mountpoint"],
                                  _mount_device(cfg["mountpoint"]))
        if ready_fd is not None:
            os.write(ready_fd, READY)
            os.close(ready_fd)
        _notify_systemd(b"READY=1")
        warmer.start()

    code = 0
    try:
        _run_loop(_main, ops, announce, stop)
        if not state["ready"] and stop.received is not None:
            # asked to stop as it started: a clean stop, but the mount never served
            report(1, f"stopped by signal {stop.received} before the mount on "
                      f"{cfg['mountpoint']} was ready", logging.WARNING)
        elif not state["ready"]:
            code = report(1, f"the kernel refused the mount on {cfg['mountpoint']} "
                             f"(see {_daemon_log(cfg) if daemon else 'the messages above'})")
    except BaseException:
        log.exception("mount loop failed")
        code = 1
        try:
            pyfuse3.close(unmount=True)
        except Exception:
            log.exception("cleanup after failure")
    else:
        pyfuse3.close(unmount=True)
    finally:
        warmer.stop()
        ops.local.close()
        ops.reader.close()
        repo.close()
        daemonrecord.drop_record(cfg["state_dir"], cfg["mountpoint"])
        _notify_systemd(b"STOPPING=1")
    log.info("unmounted %s", cfg["mountpoint"])
    return code


# Descriptor-table slots reserved at start-up: the range readers take up to 4,096
# descriptors (gravfs.version.committed.reader), open files and sockets the rest.
FD_TABLE_SLOTS = 8192


def _reserve_descriptors(slots: int = FD_TABLE_SLOTS) -> None:
    """Grow the descriptor table to its working size while the daemon has one thread.

    Every mapped range SST holds a descriptor (mmap keeps a duplicate), and the
    kernel doubles the table as they pass 64, 128, 256, ...; in a process with
    threads each doubling waits for an RCU grace period (8-15 ms measured here),
    paid by whichever lookup opened the range. The table never shrinks, so the
    slots cost 8 bytes each, once. Within the descriptor limit."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = slots if soft == resource.RLIM_INFINITY else min(slots, soft)
    if top <= 64:  # the table a process starts with
        return
    try:
        os.fstat(top - 1)
        return  # in use: the table is that large already (and the descriptor not ours)
    except OSError:
        pass
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.dup2(fd, top - 1, inheritable=False)
            os.close(top - 1)
        finally:
            os.close(fd)
    except OSError as exc:
        log.debug("descriptor table not reserved (%d slots): %s", top, exc)
        return
    log.debug("descriptor table reserved: %d slots", top)


# CPython collects its youngest generation every 700 net allocations and walks the
# older ones from there; a traversal leaves the daemon holding an inode, a node and an
# entry per name (long-lived, free of cycles), so the default thresholds spent about a
# quarter of a `find` (bench_mount scale: 21.6k -> 28.0k entries/s on 200k entries)
# walking them. Cycles (trio's, exceptions') still go at the first collection.
# 200k, not 50k: the stat cache keeps a listing's last 32k nodes, which 50k let survive
# into the middle generation, walked there again and again (a million-entry `find`
# in-process: 0.87 s of collections, the longest pause 79 ms; at 200k 0.27 s and 44 ms,
# 6-7% more entries/s).
GC_THRESHOLDS = (200_000, 20, 20)


def _tune_gc() -> None:
    import gc

    gc.collect()
    gc.freeze()  # what start-up made lives as long as the mount
    gc.set_threshold(*GC_THRESHOLDS)
    log.debug("gc thresholds %s, %d start-up objects frozen", GC_THRESHOLDS, gc.get_freeze_count())


def _run_loop(main, *args) -> None:
    """trio.run, under cProfile when GRAVFS_PROFILE names a file for its stats
    (the event loop's thread only: where the mount's per-request cost is)."""
    import trio

    _tune_gc()
    path = os.environ.get("GRAVFS_PROFILE")
    if not path:
        trio.run(main, *args)
        return
    import cProfile

    prof = cProfile.Profile()
    try:
        prof.runcall(trio.run, main, *args)
    finally:
        prof.dump_stats(path)


async def _main(ops, announce, stop: StopSignals) -> None:
    import pyfuse3
    import trio

    from gravfs.fuse.spin import ACTIVITY
    from gravfs.fuse.watcher import Watcher

    watcher = Watcher(ops)
    async with trio.open_nursery() as nursery:
        ops.nursery = nursery
        nursery.start_soon(watcher.run)
        nursery.start_soon(_signals, watcher.limiter, stop)
        nursery.start_soon(_self_check, ops, announce)
        nursery.start_soon(_sync_loop, ops.repo)
        nursery.start_soon(ops.forgets.run, ops.let_go)
        if ops.settings.spin_us:
            log.info("polling for %d us after each request (-o spin_us=0: never)",
                     ops.settings.spin_us)
            nursery.start_soon(ACTIVITY.run, ops.settings.spin_us / 1e6)
        if not ops.settings.read_only:
            from gravfs.fuse.operations import DIRECT_WRITES
            log.info("write-only opens %s the page cache (kernel %s; direct writes from %d.%d)",
                     "bypass" if DIRECT_WRITES else "keep", os.uname().release,
                     *kernel.DIRECT_WRITES_SINCE)
        await pyfuse3.main(min_tasks=4, max_tasks=64)
        log.info("kernel ended the session; staging open files")
        nursery.cancel_scope.cancel()
    await ops.flush_all()
    from gravfs.fuse import opstats
    opstats.dump()


async def _sync_loop(repo) -> None:
    """Every second: sync the (MDB_NOSYNC) staging database, retry failed uploads."""
    import trio

    while True:
        await trio.sleep(SYNC_INTERVAL)
        try:
            await trio.to_thread.run_sync(repo.staging.sync)
            if repo.data.retry_due():
                await trio.to_thread.run_sync(repo.data.requeue_pending)
        except Exception:
            log.exception("periodic staging sync")


async def _self_check(ops, announce) -> None:
    """Ask the mount for our own pid: once that works the mount is really usable.

    Only then is readiness announced (a FUSE INIT the kernel rejects ends the
    session instead), and the read-ahead raised (INIT's reply sets it first).
    """
    import trio

    mountpoint = ops.settings.mountpoint
    while True:
        try:
            # abandoned if the daemon stops first (a signal as it starts): the request
            # then waits for the unmount, which ends it
            got = await trio.to_thread.run_sync(os.getxattr, mountpoint, "user.gravfs.pid",
                                                abandon_on_cancel=True)
        except OSError as exc:
            log.debug("self check of %s: %s", mountpoint, exc)
            await trio.sleep(0.05)
            continue
        if int(got) == os.getpid():
            break
        await trio.sleep(0.05)  # an older mount still on top; ours is not visible yet
    await trio.to_thread.run_sync(tune_readahead, mountpoint, ops.settings.readahead_kb)
    announce()


async def _signals(invalidating, stop: StopSignals) -> None:
    """SIGTERM/SIGINT: stop serving. The watcher's invalidation thread may be waiting in
    the kernel on a request that holds a directory or a page: the loop keeps serving
    until it is done (``invalidating``, its limiter, is taken and kept, so none
    starts after), else that thread would wait for good on a request nobody answers
    and the daemon's exit on that thread."""
    import pyfuse3
    import trio

    async def handle(sig: int) -> None:
        if sig == signal.SIGHUP:
            return
        if stop.received is not None:
            _already_stopping(sig)
            return
        stop.received = sig
        log.info("signal %d: unmounting", sig)
        with trio.move_on_after(QUIET_WAIT) as waited:
            await invalidating.acquire()
        if waited.cancelled_caught:
            log.warning("the kernel has not finished an invalidation in %.0f s; "
                        "unmounting anyway", QUIET_WAIT)
        pyfuse3.terminate()

    with trio.open_signal_receiver(*STOP_SIGNALS) as sigs:
        for sig in stop.receiver_opened():  # those that came before it opened
            await handle(sig)
        async for sig in sigs:
            await handle(sig)


def _already_stopping(sig: int) -> None:
    """A SIGTERM or SIGINT after the first (a second Ctrl-C) while the daemon stops:
    dying then would leave open files unstaged and the mount dead; SIGKILL still
    stops it at once."""
    log.warning("signal %d: already unmounting and staging open files; "
                "SIGKILL stops at once without staging them", sig)


# The signals _signals receives (SIGHUP: ignored, not the default end).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StopSignals:
    """The handler of STOP_SIGNALS outside _signals' receiver, installed before the
    kernel mounts: a signal that comes before the receiver opens is kept for it (the
    defaults would end the daemon and leave a dead mount), one after it closed (the
    daemon stopping: trio restores this handler) only says so, up to the process's exit."""

    def __init__(self) -> None:
        self.early: list[int] = []
        self.opened = False
        self.received: Optional[int] = None  # the signal that stopped the daemon
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, sig: int, _frame) -> None:
        if self.opened:
            if sig != signal.SIGHUP:
                _already_stopping(sig)
        else:
            self.early.append(sig)

    def receiver_opened(self) -> list[int]:
        """What came before the receiver: it handles them first."""
        self.opened = True
        early, self.early = self.early, []
        if early:
            log.info("signal(s) %s came as the mount started", early)
        return early


def _files_dir(repo) -> str:
    """A private directory for this daemon's local copies; dead daemons' leftovers go."""
    base = repo.workspace.sub("files")
    dead = live = 0
    for name in os.listdir(base):
        m = re.match(r"(\d+)-", name)
        if m and name.endswith(".report"):  # a dead daemon's exit report nobody read
            if not _alive(int(m.group(1))):
                _remove(os.path.join(base, name))
            continue
        if m and not _alive(int(m.group(1))):
            dead += 1
            path = os.path.join(base, name)
            leftovers = _written_files(path)
            if leftovers:
                log.warning("removing %d unsaved local file(s) of a dead mount in %s (they were "
                            "never closed or fsync'd)", leftovers, path)
            shutil.rmtree(path, ignore_errors=True)
        elif m:
            live += 1
    if dead and not live:
        # files a dead mount created and never closed: staged provisional, never to be
        # closed now (with another mount alive they may be its own: left alone)
        try:
            n = repo.staging.drop_provisional()
        except GravfsError as exc:
            log.warning("cannot remove the files a dead mount created and never closed: %s", exc)
        else:
            if n:
                log.warning("removed %d file(s) a dead mount created and never closed", n)
    path = os.path.join(base, f"{os.getpid()}-{int(time.time())}")
    os.makedirs(path, exist_ok=True)
    return path


def _written_files(path: str) -> int:
    """How many files in a dead daemon's directory and its subdirectories (those made
    ahead go there) hold content (empty ones were made ahead, or created and never
    written: nothing of theirs is lost)."""
    found = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                st = os.lstat(os.path.join(d, n))
            except OSError:
                continue
            found += stat.S_ISREG(st.st_mode) and st.st_size > 0
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not _zombie(pid)


def _short_url(url: str) -> str:
    return url.replace(",", "_")


def _notify_systemd(msg: bytes) -> None:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(msg)
    except OSError as exc:
        log.warning("cannot notify systemd: %s", exc)


# -- umount -----------------------------------------------------------------------------


FUSECTL = "/sys/fs/fuse/connections"


def _abort_connection(mountpoint: str) -> None:
    """Abort the FUSE connection of the mount (root only): every request waiting on its
    daemon fails (ECONNABORTED), later ones get ENOTCONN, and the daemon's reads of
    /dev/fuse end."""
    dev = _mount_device(mountpoint)
    if dev is None:
        raise GravfsError(f"{mountpoint} is not mounted")
    major, minor = (int(x) for x in dev.split(":"))
    conn = os.path.join(FUSECTL, str(major << 20 | minor))  # the kernel's dev_t, as fusectl names it
    if not os.path.isdir(conn):  # fusectl not mounted here yet
        subprocess.run(["mount", "-t", "fusectl", "none", FUSECTL], capture_output=True)
    try:
        with open(os.path.join(conn, "abort"), "w") as f:
            f.write("1")
    except OSError as exc:
        raise GravfsError(f"cannot abort the FUSE connection of {mountpoint} ({conn}/abort: "
                          f"{exc.strerror}; root only, with fusectl mounted on {FUSECTL})") from exc


def umount(args) -> int:
    """Unmount and wait for the daemon; exit 1 (one line per file on stderr) when it
    could not stage some open files and saved them in lost+found instead.
    ``--force``: abort the mount's FUSE connection first (a daemon that no longer
    answers: see _ask_pid)."""
    mountpoint = mount_path(args.mountpoint)
    _gravfs_mount(mountpoint)
    if getattr(args, "force", False):
        _abort_connection(mountpoint)
        _lazy_unmount(mountpoint)
        log.warning("aborted the FUSE connection of %s and unmounted it", mountpoint)
        return 0
    try:
        pid: Optional[int] = _ask_pid(mountpoint)
    except DaemonHung as hung:
        state_dir = os.path.abspath(getattr(args, "state_dir", None) or default_state_dir())
        _abort_killed(mountpoint, state_dir, hung)
        return 0
    except OSError:
        pid = None
    report = _exit_report_path(mountpoint)
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    cmd = [tool, "-u", mountpoint] if tool else ["umount", mountpoint]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        said = msg[-1] if msg else "failed"
        if "busy" in said:  # name whom to stop (fusermount3's line names nobody)
            users = mount_users(mountpoint)
            if users:
                said = (f"it is in use by {', '.join(users)}: stop them (or 'fusermount3 "
                        f"-u -z {mountpoint}' detaches it now; the daemon then stages and "
                        "exits when they let go)")
        raise GravfsError(f"cannot unmount {mountpoint}: {said}")
    if pid is not None:
        start = time.monotonic()
        told = start + UMOUNT_TELL  # a daemon finishing big uploads may take minutes
        while _alive(pid):
            now = time.monotonic()
            if now > start + UMOUNT_WAIT:
                raise GravfsError(f"unmounted, but the daemon (pid {pid}) is still staging "
                                  f"files or finishing uploads (it goes on; see its log)")
            if now > told:
                print(f"gravfs: unmounted; the daemon (pid {pid}) is still staging files or "
                      f"finishing uploads ({now - start:.0f} s)", file=sys.stderr)
                told = now + UMOUNT_TELL_EVERY
            time.sleep(0.05)
    return _print_exit_report(report) if report else 0


def _exit_report_path(mountpoint: str) -> Optional[str]:
    try:
        return os.fsdecode(os.getxattr(mountpoint, "user.gravfs.exit_report"))
    except OSError:
        return None  # an older daemon


def _print_exit_report(path: str) -> int:
    """The files the daemon saved in lost+found at its exit, one line each; 1 if any."""
    try:
        with open(path) as f:
            rows = json.load(f)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as exc:
        print(f"gravfs: cannot read the daemon's exit report {path}: {exc}", file=sys.stderr)
        return 1
    _remove(path)
    for row in rows:
        print(f"gravfs: {row['file']} could not be staged ({row['error']}); its content is "
              f"saved as {row['saved']}", file=sys.stderr)
    return 1 if rows else 0


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _zombie(pid: int) -> bool:
    """A zombie, or gone."""
    return daemonrecord.process_state(pid) in ("Z", None)
