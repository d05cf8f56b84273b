"""gravfs.version.outage: while the store is down, one reader at a time asks it again."""

from __future__ import annotations

import logging
import time

from gravfs.errors import StoreUnavailableError
from gravfs.version.outage import StoreOutage


def test_one_reader_asks_a_down_store_once_per_retry_and_an_answer_ends_the_outage(caplog):
    outage = StoreOutage(retry=0.2)
    assert outage.may_ask() and outage.may_ask()  # up: everyone asks
    with caplog.at_level(logging.INFO, logger="gravfs.version.outage"):
        outage.failed(StoreUnavailableError("store at X unavailable"))
        outage.failed(StoreUnavailableError("store at X unavailable"))  # logged once
        assert outage.down and not outage.may_ask()
        time.sleep(0.21)
        assert outage.may_ask()  # this reader asks again...
        assert not outage.may_ask()  # ...and no other while it does
        outage.gave_up()  # it stopped without an answer: the next one may
        assert outage.may_ask()
        outage.failed(StoreUnavailableError("store at X unavailable"))
        assert not outage.may_ask()  # another retry period
        outage.answered()  # (the watcher's fresh read, say)
        assert not outage.down and outage.may_ask() and outage.may_ask()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "heads read last" in warned[0].getMessage()
    assert "answers again" in caplog.text


def test_an_outage_is_dated_from_the_failed_read_s_start_not_from_its_timeout(caplog):
    """A read that waited out its timeout found the store down since it was sent: the
    end of the outage reports that span (it reported only the time since the error)."""
    outage = StoreOutage(retry=5)
    with caplog.at_level(logging.INFO, logger="gravfs.version.outage"):
        outage.failed(StoreUnavailableError("store at X unavailable"), time.monotonic() - 62)
        outage.answered()
    ended = [r.getMessage() for r in caplog.records if "answers again" in r.getMessage()]
    assert ended == ["the object store answers again after 62 s: branch heads are read "
                     "from it"]
