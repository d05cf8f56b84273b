"""Mount options: ``-o a,b=c`` strings -> FUSE options + gravfs settings.

Options a user may write in /etc/fstab that only matter to mount(8) (auto,
nofail, _netdev, x-systemd.*, ...) are accepted and ignored; gravfs's own
options (branch=, store=, state_dir=, poll=, ...) configure the daemon; the
rest are passed to FUSE if FUSE knows them, else refused with a clear error.
The same MountOptions, completed with the branch and mount point, are the
settings the mount's handlers read (gravfs.fuse.operations).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gravfs.errors import GravfsError
from gravfs.store.endpoint import check_endpoint

# mount(8)/fstab options that mean nothing to a FUSE daemon.
IGNORED = {"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group", "nofail",
           "_netdev", "rw", "async", "nodiratime", "diratime", "lazytime", "nolazytime", "sync",
           "loud", "silent", "remount", "bind"}
# when reads update a file's atime (gravfs.fuse.operations: on the release of a handle
# that read); "atime" is mount(8)'s name for relatime
ATIME_MODES = {"noatime": "noatime", "relatime": "relatime", "atime": "relatime",
               "strictatime": "strictatime"}
IGNORED_PREFIXES = ("x-", "comment=", "context=", "fscontext=", "defcontext=", "rootcontext=")
# passed through to libfuse (fuse_session_new / fuse_session_mount)
FUSE_FLAGS = {"allow_other", "allow_root", "default_permissions", "nosuid", "suid", "nodev",
              "dev", "noexec", "exec", "dirsync", "auto_unmount", "debug"}
FUSE_VALUED = {"fsname", "subtype"}


@dataclass
class MountOptions:
    """Everything one mount is told (``-o`` options, and the branch and mount point
    ``gravfs mount`` resolves); the defaults are README's."""

    fuse: set = field(default_factory=set)
    read_only: bool = False
    branch: Optional[str] = None
    store: Optional[str] = None
    state_dir: Optional[str] = None
    s3_endpoint: Optional[str] = None
    # S3 time limits (gravfs.store.s3timeouts); None: the environment's or the default
    s3_connect_timeout: Optional[float] = None
    s3_read_timeout: Optional[float] = None
    s3_timeout: Optional[float] = None
    s3_max_attempts: Optional[int] = None
    poll: float = 0.5  # seconds between the watcher's looks at heads and staging
    attr_timeout: float = 10.0  # branch trees; the watcher invalidates on every change
    immutable_ttl: float = 86400.0  # commits and tags never change (not an -o option)
    head_ttl: float = 1.0
    commits_listed: int = 200
    cache_mb: int = 256  # the reader's cache: ranged chunks and small files read whole
    # decoded metadata blocks kept by the daemon (gravfs.sstable.cache); None: a quarter
    # of the memory the daemon may use (physical, or its cgroup's limit)
    meta_cache_mb: Optional[int] = None
    readahead_kb: int = 4096  # 4 x 1 MiB requests in flight: parallel preads of the tier
    spin_us: int = 100  # the event loop polls this long after a request (gravfs.fuse.spin)
    # ranges of the mount's branch opened in the background once it is ready
    # (gravfs.fuse.warmer): ~15 KiB each
    warm_ranges: int = 4096
    threads: int = 24
    debug: bool = False
    log_file: Optional[str] = None
    mountpoint: str = ""  # absolute; set by gravfs mount, not an -o option
    # a mount point holding files is refused unless asked for (the mount would hide them)
    nonempty: bool = False
    # reads leave atime alone by default: an atime change is a staged change of the
    # entry (status, diff, the next commit), which reading should not make
    atime: str = "noatime"


def parse(opts: list[str]) -> MountOptions:
    """Parse every ``-o`` value (each may hold several comma-separated options)."""
    out = MountOptions(fuse={"default_permissions"})
    for group in opts or []:
        for item in group.split(","):
            item = item.strip()
            if not item:
                continue
            name, eq, value = item.partition("=")
            if name in IGNORED or item.startswith(IGNORED_PREFIXES):
                continue
            if name in ATIME_MODES and not eq:
                out.atime = ATIME_MODES[name]
            elif name == "ro":
                out.read_only = True
                out.fuse.add("ro")
            elif name == "debug":
                out.debug = True
            elif name == "nonempty" and not eq:  # gravfs's check; libfuse 3 has no such option
                out.nonempty = True
            elif name == "s3_endpoint" and eq:
                out.s3_endpoint = check_endpoint(value, "-o s3_endpoint")
            elif name in ("branch", "store", "state_dir", "log_file") and eq:
                setattr(out, name, value)
            elif name in ("poll", "attr_timeout", "head_ttl", "s3_connect_timeout", "s3_read_timeout",
                          "s3_timeout") and eq:
                out.__dict__[name] = _number(name, value, float)
            elif name in ("commits_listed", "cache_mb", "meta_cache_mb", "threads", "readahead_kb",
                          "s3_max_attempts", "spin_us", "warm_ranges") and eq:
                out.__dict__[name] = _number(name, value, int)
            elif name in FUSE_FLAGS and not eq:
                out.fuse.add(name)
            elif name in FUSE_VALUED and eq:
                out.fuse.add(item)
            else:
                raise GravfsError(f"unknown mount option {item!r}")
    return out


# Options whose zero would break the mount: no worker thread (every request that needs
# one would wait forever), no S3 attempt, a timeout already passed, a watcher reading
# every head from the store in a loop with no pause.
POSITIVE = frozenset({"threads", "s3_max_attempts", "s3_connect_timeout", "s3_read_timeout",
                      "s3_timeout", "poll"})


def _number(name: str, value: str, kind):
    try:
        v = kind(value)
    except ValueError:
        raise GravfsError(f"mount option {name}={value!r}: not a number") from None
    if v < 0:
        raise GravfsError(f"mount option {name}={value!r}: must not be negative")
    if v == 0 and name in POSITIVE:
        raise GravfsError(f"mount option {name}={value!r}: must be more than 0")
    return v
