"""What a Spark import leaves out of its tree, for the driver's summary.

Executors name each path they pass over in their log (Spark's log, not the user's
terminal), so the driver gathers them in an accumulator to report at the end, as
``gravfs import`` warns at the terminal. Spark may run a task twice (a lost
executor, a stage recomputed) and adds both runs' updates, so the accumulator does
not add counts: it keeps each unit's own finding under the unit's name, and a unit
run twice is counted once.
"""

from __future__ import annotations

from typing import Hashable

SHOWN = 5  # paths named in the summary; the log names every one


class _UnitFindings:
    """Spark's accumulator parameter (duck-typed: no pyspark import at module load):
    unit -> (count, the first paths), merged by unit."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 (Spark's name)
        a.update(b)
        return a


def accumulator(sc):
    """An accumulator of left-out paths for one import."""
    return sc.accumulator({}, _UnitFindings())


def note(acc, unit: Hashable, paths: list[str]) -> None:
    """Record what ``unit`` (a name no other unit of the import has) left out."""
    if paths:
        acc.add({unit: (len(paths), tuple(sorted(paths)[:SHOWN]))})


def total(acc) -> tuple[int, tuple[str, ...]]:
    """(how many paths the import left out, the first SHOWN of them in order)."""
    found = acc.value
    count = sum(n for n, _ in found.values())
    return count, tuple(sorted(p for _, shown in found.values() for p in shown)[:SHOWN])
