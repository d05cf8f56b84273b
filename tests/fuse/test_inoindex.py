"""InoIndex against a dict: same answers, and emptied spans give their lists back."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gravfs.fuse.inoindex import SPAN, THIN, InoIndex

DENSE = 1 << 20


def check_same(index: InoIndex, model: dict) -> None:
    assert len(index) == len(model)
    assert sorted(index.values()) == sorted(model.values())
    for ino, value in model.items():
        assert index.get(ino) == value and ino in index


numbers = st.one_of(st.integers(0, 4 * SPAN), st.integers(DENSE, DENSE + 10))


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), numbers, st.integers(0, 9)), max_size=400))
def test_it_answers_as_a_dict_would(ops):
    index: InoIndex[str] = InoIndex(dense_below=DENSE)
    model: dict[int, str] = {}
    for put, ino, tag in ops:
        if put:
            index[ino] = model[ino] = f"{ino}:{tag}"
        else:
            assert index.pop(ino, "none") == model.pop(ino, "none")
        assert index.get(ino) == model.get(ino)
    check_same(index, model)
    index.compact()
    check_same(index, model)


def test_a_span_is_dropped_when_its_last_inode_goes_and_thinned_before():
    index: InoIndex[int] = InoIndex(dense_below=DENSE)
    for ino in range(3 * SPAN):  # three spans; the third is the newest
        index[ino] = ino
    assert index.spans() == 3
    for ino in range(SPAN - THIN):  # the first span down to THIN: its few go to the dict
        index.pop(ino)
    assert index.spans() == 2
    assert [index.get(ino) for ino in range(SPAN - THIN - 1, SPAN + 1)] == [None] + list(
        range(SPAN - THIN, SPAN + 1))
    for ino in range(SPAN, 2 * SPAN):
        index.pop(ino)
    assert index.spans() == 1
    for ino in range(2 * SPAN, 3 * SPAN - 1):  # the newest span is never thinned
        index.pop(ino)
    assert index.spans() == 1 and index.get(3 * SPAN - 1) == 3 * SPAN - 1
    assert len(index) == THIN + 1


def test_a_number_back_in_a_thinned_span_is_found_and_counted_once():
    index: InoIndex[str] = InoIndex(dense_below=DENSE)
    for ino in range(2 * SPAN):
        index[ino] = "a"
    for ino in range(1, SPAN):
        index.pop(ino)  # span 0 is thinned: 0 lives in the dict
    index[5] = "b"  # a new list for span 0, beside the dict
    index[0] = "c"  # replaces the one in the dict
    assert (index.get(0), index.get(5), len(index)) == ("c", "b", SPAN + 2)
    assert index.pop(0) == "c" and index.get(0) is None and len(index) == SPAN + 1
