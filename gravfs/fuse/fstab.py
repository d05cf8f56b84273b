"""``mount.gravfs``: the helper mount(8) runs for /etc/fstab entries and ``mount -t``.

    mount.gravfs STORE MOUNTPOINT [-sfnv] [-N NS] [-o OPTIONS] [-t fuse.gravfs]

STORE is a store URL (a path, file://PATH or s3://BUCKET/PREFIX). Besides FUSE
options (allow_other, ro, ...) OPTIONS may hold gravfs's own: branch=NAME,
state_dir=DIR, s3_endpoint=URL, poll=SECONDS, attr_timeout=SECONDS,
cache_mb=N, log_file=PATH, and ``foreground`` (stay in the foreground, as the
systemd unit does). Exit codes follow mount(8): 0 mounted, 1 bad usage,
32 mount failure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional

from gravfs.errors import GravfsError
from gravfs.stdfds import hold_standard_fds

USAGE_ERROR = 1
MOUNT_FAILURE = 32


def _parse(argv: list[str]):
    p = argparse.ArgumentParser(prog="mount.gravfs", add_help=True,
                                description="mount a gravfs repository (mount(8) helper)")
    p.add_argument("store", metavar="STORE")
    p.add_argument("mountpoint", metavar="MOUNTPOINT")
    p.add_argument("-o", dest="options", action="append", default=[])
    p.add_argument("-s", dest="sloppy", action="store_true", help="ignore unknown options")
    p.add_argument("-f", dest="fake", action="store_true", help="do everything but mount")
    p.add_argument("-n", dest="nomtab", action="store_true", help="(ignored: no mtab)")
    p.add_argument("-v", dest="verbose", action="count", default=0)
    p.add_argument("-N", dest="namespace", help="(unsupported) mount namespace")
    p.add_argument("-t", dest="type", default="fuse.gravfs")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    hold_standard_fds()
    try:
        a = _parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return USAGE_ERROR if exc.code else 0
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="mount.gravfs: %(message)s")
    if a.namespace:
        print("mount.gravfs: -N (mount namespaces) is not supported", file=sys.stderr)
        return USAGE_ERROR
    foreground = False
    options = []
    for group in a.options:
        for item in group.split(","):
            if item == "foreground":
                foreground = True
            elif item:
                options.append(item)
    from gravfs.fuse import launch
    from gravfs.fuse import options as mount_options

    try:
        opts = mount_options.parse([",".join(options)])
    except GravfsError as exc:
        if not a.sloppy:
            print(f"mount.gravfs: {exc}", file=sys.stderr)
            return USAGE_ERROR
        options = [o for o in options if _known(o)]
        opts = mount_options.parse([",".join(options)])
    if a.fake:
        return 0
    args = argparse.Namespace(store=a.store, state_dir=opts.state_dir, branch=opts.branch,
                              mountpoint=a.mountpoint, foreground=foreground,
                              options=[",".join(options)], verbose=a.verbose)
    try:
        return launch.mount(args) or 0
    except GravfsError as exc:
        print(f"mount.gravfs: {exc}", file=sys.stderr)
        return MOUNT_FAILURE


def _known(item: str) -> bool:
    from gravfs.fuse import options as mount_options
    try:
        mount_options.parse([item])
        return True
    except GravfsError:
        return False


if __name__ == "__main__":
    sys.exit(main())
