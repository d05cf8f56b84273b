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


def test_a_key_given_twice_is_refused_where_keys_are_unique():
    assert parse_pairs(["a=1", "a=2"], "--conf") == [("a", "1"), ("a", "2")]
    with pytest.raises(GravfsError, match="--meta a given twice: give each key once"):
        parse_pairs(["a=1", "b=1", " a=2"], "--meta", unique=True)
