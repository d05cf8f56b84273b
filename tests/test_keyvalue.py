"""KEY=VALUE arguments: pairs in order, the first '=' splits, bad ones name their flag."""

import pytest

from gravfs.errors import GravfsError
from gravfs.keyvalue import parse_pairs


def test_pairs_keep_order_and_split_at_the_first_equals():
    assert parse_pairs([" a =1", "b=x=y", "c="], "--meta") == [("a", "1"), ("b", "x=y"), ("c", "")]


@pytest.mark.parametrize("bad", ["novalue", "=v", " =v"])
def test_a_bad_pair_names_the_flag(bad):
    with pytest.raises(GravfsError, match=f"--conf needs KEY=VALUE, got {bad!r}"):
        parse_pairs(["ok=1", bad], "--conf")
