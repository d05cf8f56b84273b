"""GRAVFS_LOG: a level's name or number; anything else said and ignored."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from gravfs.loglevel import env_log_level
from tests.repo_util import run_cli


@pytest.mark.parametrize("value, level", [("debug", logging.DEBUG), ("INFO", logging.INFO),
                                          (" Error ", logging.ERROR), ("5", 5),
                                          ("", logging.WARNING)])
def test_names_and_numbers_are_levels(monkeypatch, capsys, value, level):
    monkeypatch.setenv("GRAVFS_LOG", value)
    assert env_log_level(logging.WARNING) == level
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["bogus", "basic_format", "root", "-1", "warn ing"])
def test_anything_else_is_said_and_ignored(monkeypatch, capsys, value):
    monkeypatch.setenv("GRAVFS_LOG", value)
    assert env_log_level(logging.INFO) == logging.INFO
    err = capsys.readouterr().err
    assert err.startswith(f"gravfs: GRAVFS_LOG={value!r} is not a log level") and err.count("\n") == 1
    assert env_log_level(logging.INFO, say=False) == logging.INFO
    assert capsys.readouterr().err == ""


def test_a_command_runs_on_with_a_bad_level(tmp_path):
    """``basic_format`` (an attribute of the logging module, read as a level) stopped
    every command with a traceback."""
    store, state = str(tmp_path / "store"), str(tmp_path / "state")
    run_cli("init", store=store, state=state)
    env = dict(os.environ, GRAVFS_STORE=store, GRAVFS_STATE_DIR=state, GRAVFS_LOG="basic_format")
    p = subprocess.run([sys.executable, "-m", "gravfs.cli", "branch", "list"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("main")
    assert p.stderr.startswith("gravfs: GRAVFS_LOG='basic_format' is not a log level")
