"""Mount option parsing: gravfs's own options, FUSE's, fstab's, and bad values."""

from __future__ import annotations

import pytest

from gravfs.errors import GravfsError
from gravfs.fuse import options


def test_numbers_and_flags():
    o = options.parse(["meta_cache_mb=64,cache_mb=32", "ro,allow_other", "poll=0.25,noauto"])
    assert (o.meta_cache_mb, o.cache_mb, o.poll, o.read_only) == (64, 32, 0.25, True)
    assert {"ro", "allow_other", "default_permissions"} <= o.fuse
    assert options.parse([]).meta_cache_mb is None  # the daemon's default budget
    assert (options.parse([]).spin_us, options.parse(["spin_us=0"]).spin_us) == (100, 0)
    assert (options.parse([]).warm_ranges, options.parse(["warm_ranges=0"]).warm_ranges) == (4096, 0)
    # gravfs's own check: libfuse 3 refuses "nonempty", so it is never passed on
    o = options.parse(["nonempty,allow_other"])
    assert o.nonempty and "nonempty" not in o.fuse and not options.parse([]).nonempty


@pytest.mark.parametrize("bad, needle", [
    ("meta_cache_mb=lots", "not a number"),
    ("meta_cache_mb=-1", "must not be negative"),
    ("spin_us=short", "not a number"),
    ("warm_ranges=-3", "must not be negative"),
    ("threads=0", "must be more than 0"),  # no worker thread: the mount hung on first use
    ("s3_max_attempts=0", "must be more than 0"),
    ("s3_timeout=0", "must be more than 0"),
    ("poll=0", "must be more than 0"),  # the watcher read every head from the store nonstop
    ("meta_cache_mb", "unknown mount option"),
    ("bogus=1", "unknown mount option"),
    ("s3_endpoint=127.0.0.1:8333", "is not an endpoint URL"),  # boto3: an internal error
    ("s3_endpoint=http://h:port", "has a port that is not a number"),
])
def test_bad_values_are_clear_errors(bad, needle):
    with pytest.raises(GravfsError, match=needle):
        options.parse([bad])
