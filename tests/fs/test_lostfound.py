"""lost+found names: a taken name gets .N, a saved file appears whole or not at all."""

from __future__ import annotations

import os

import pytest

from gravfs.fs.lostfound import free_name, lost_found_path, save_whole
from gravfs.version.config import Workspace


def test_a_saved_file_appears_whole_under_a_free_name(tmp_path):
    dest = str(tmp_path / "lf" / "main" / "d" / "f")
    assert save_whole(dest, lambda out: out.write(b"one")) == dest
    assert save_whole(dest, lambda out: out.write(b"two")) == dest + ".1"
    assert free_name(dest) == dest + ".2"
    assert open(dest, "rb").read() == b"one" and open(dest + ".1", "rb").read() == b"two"

    def torn(out):
        out.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        save_whole(dest, torn)
    assert sorted(os.listdir(os.path.dirname(dest))) == ["f", "f.1"]  # no name, no temp


def test_a_key_is_saved_under_its_shown_path(tmp_path):
    ws = Workspace(str(tmp_path / "ws"))
    assert lost_found_path(ws, "dev", b"a/b.csv") == str(tmp_path / "ws" / "lost+found" /
                                                         "dev" / "a" / "b.csv")
