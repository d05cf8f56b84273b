"""The log level ``GRAVFS_LOG`` asks for, one rule for the CLI and the mount daemon."""

from __future__ import annotations

import logging
import os
import sys

LEVELS = ("debug", "info", "warning", "error", "critical")
ENV = "GRAVFS_LOG"


def env_log_level(default: int, say: bool = True) -> int:
    """``GRAVFS_LOG``'s level (a name of LEVELS or a number) over ``default``. Anything
    else is ignored, and said on stderr with ``say`` (the mount daemon's command has
    said it): read as an attribute of the logging module, ``basic_format`` stopped
    every command with a traceback and ``bogus`` was taken silently."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return default
    if value.lower() in LEVELS:
        return getattr(logging, value.upper())
    if value.isdigit():
        return int(value)
    if say and sys.stderr is not None:
        print(f"gravfs: {ENV}={value!r} is not a log level ({', '.join(LEVELS)} or a number); "
              "ignored", file=sys.stderr)
    return default
