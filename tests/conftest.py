"""Shared fixtures. Heavy real components (SeaweedFS, FUSE, Spark) live in their own plugin modules."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT = os.path.join(os.path.dirname(ROOT), "shared", "compat")

pytest_plugins = ["tests.s3server"]


@pytest.fixture
def compat_dir() -> str:
    """../shared/compat, used in place (never copied into the project)."""
    assert os.path.isdir(COMPAT), f"compat corpus missing at {COMPAT}"
    return COMPAT
