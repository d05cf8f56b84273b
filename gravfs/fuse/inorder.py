"""Readers that open a directory's files in name order, and the names to load for them.

``cp -r``, ``tar``, ``rsync`` and a loop over a sorted listing open a directory's
files one after another in name order. Each small file's first read then costs a
worker thread's trip (gravfs.data.reader.DataReader.load_ahead says why that is
the larger part of it); loading the next files' contents while the reader is still
on the earlier ones takes that trip off every read. This module only decides when
and which names; the caller lists and loads.

After ``run`` opens in a row that went up the names, the next ``first`` names are
listed and loaded. From then on the reader must open the names of the loaded batches
in their order (it may skip some: a listing also holds directories and files it does
not read); once it is half-way through what was loaded, the next batch is listed,
twice as long as the last, up to ``batch``. Any other open starts over. So a random
reader whose opens happen to go up a few times in a row costs at most a small batch
now and then (with ``run`` 3, four opens in ascending order: one in 24 of a random
order), and a scan soon gets a full batch ahead of it.
"""

from __future__ import annotations

from typing import Hashable, Optional

RUN = 3  # ascending opens in a row (after the first) before the first batch
FIRST = 4  # names in the first batch
BATCH = 32  # names in a batch at most
DIRS = 64  # directories followed at once (the least recently opened in goes first)


class _Directory:
    __slots__ = ("last", "run", "names", "pos", "size", "ended", "loading")

    def __init__(self) -> None:
        self.last: Optional[bytes] = None  # the name opened last
        self.run = 0  # opens in a row that went up (before a batch)
        self.names: list[bytes] = []  # loaded names the reader has not passed, in order
        self.pos = 0  # names[pos] and later: not opened yet
        self.size = 0  # names in the last batch asked for (0: none since the run began)
        self.ended = False  # a batch reached the directory's end (or its listing failed)
        self.loading = False  # a batch is being listed

    def reset(self, run: int) -> None:
        self.run, self.names, self.pos, self.size, self.ended = run, [], 0, 0, False


class InOrderReads:
    """The directories being read in name order (bounded), keyed as the caller likes."""

    def __init__(self, run: int = RUN, first: int = FIRST, batch: int = BATCH, dirs: int = DIRS):
        self.run, self.first, self.batch, self.dirs = run, first, batch, dirs
        self._dirs: dict[Hashable, _Directory] = {}

    def opened(self, where: Hashable, name: bytes) -> Optional[tuple[bytes, int]]:
        """Note that ``name`` in directory ``where`` was opened for reading. Returns
        (the name after which to list, how many) for the next batch, which the caller
        then lists and hands to ``loaded``; None when nothing is to be loaded now.
        Names are listing keys (Node.listing_key), compared in the listing's order."""
        d = self._dirs.pop(where, None)
        if d is None:
            d = _Directory()
            if len(self._dirs) >= self.dirs:
                del self._dirs[next(iter(self._dirs))]
        self._dirs[where] = d  # (last: the most recently opened in)
        went_up = d.last is not None and name > d.last
        d.last = name
        if d.size:  # batches were asked for: the reader must follow them
            try:
                d.pos = d.names.index(name, d.pos) + 1
            except ValueError:
                if not (d.loading and went_up and d.pos == len(d.names)):
                    d.reset(1 if went_up else 0)  # (else: ahead of a batch being listed)
                return None
            if d.loading or d.ended or 2 * d.pos < len(d.names):
                return None
            d.loading, d.size = True, min(self.batch, 2 * d.size)
            return d.names[-1], d.size
        d.run = d.run + 1 if went_up else 0
        if d.run < self.run or d.loading:
            return None
        d.loading, d.size = True, self.first
        return name, d.size

    def loaded(self, where: Hashable, names: list[bytes], ended: bool) -> None:
        """The batch ``opened`` asked for was listed and loaded: the names loaded, in
        order (fewer than asked when the loader's budget ran out: the next batch
        starts after them); ``ended``: the directory ends there, or the listing failed
        (no batch more this run)."""
        d = self._dirs.get(where)
        if d is None:  # forgotten meanwhile (many other directories)
            return
        d.loading = False
        if d.size:  # (else the reader started over meanwhile: these are behind it)
            d.ended = ended
            d.names, d.pos = d.names[d.pos:] + names, 0
