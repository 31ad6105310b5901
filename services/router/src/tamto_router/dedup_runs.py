"""What a partition's dedup window remembers of one prefix's sequence ids: runs.

A run is the ids ``<prefix>:<n>`` of one stored batch (or a piece of one) with
strictly increasing numbers, held as its numbers and the offset of its first row
(`tamto_router.dedup` says which ids are sequence ids). A prefix's runs never
overlap: each covers a span of numbers no other run reaches into, and they are
kept in number order, so the run that may hold a number is found by one
bisection, and whether a new batch meets anything remembered is a bisection per
run its span reaches.

A new batch whose numbers all fall in the gaps between remembered runs is new
without looking up any id, wherever it falls: above every run (one producer, in
order), below or between them (the results of one input reaching the partition
out of order from several processing instances, each batch a span of input
offsets), or around them (an instance's batch made of several deliveries, with
another instance's batch in between). It is kept as one run per gap it fills.
"""

from __future__ import annotations

import array
import bisect
import itertools
from dataclasses import dataclass

import numpy as np

#: The largest sequence number (18 digits) a sequence id may carry.
MAX_SEQUENCE = 10**18 - 1
#: The most remembered runs a new batch's span may reach into, and the most pieces
#: they may be cut into, for it to be checked run by run; beyond (ids interleaved
#: finely), its ids are looked up and remembered one by one.
MAX_RUNS_CROSSED = 32


@dataclass(frozen=True, slots=True)
class IdSequence:
    """The ids of a batch when they are ``<prefix>:<n>`` with `n` strictly increasing."""

    prefix: str
    first: int
    last: int
    #: Every row's number when they are not consecutive; None: first, first+1, ..., last.
    numbers: array.array[int] | None = None

    @property
    def count(self) -> int:
        return self.last - self.first + 1 if self.numbers is None else len(self.numbers)

    def number(self, row: int) -> int:
        return self.first + row if self.numbers is None else self.numbers[row]

    def first_row_from(self, number: int) -> int:
        """The first row whose number is `number` or more (`count` if none)."""
        if self.numbers is None:
            return min(max(number - self.first, 0), self.count)
        return bisect.bisect_left(self.numbers, number)

    def piece(self, start: int, end: int) -> IdSequence:
        """Rows `start` to `end` (exclusive) as a sequence of their own."""
        if self.numbers is None:
            return IdSequence(self.prefix, self.first + start, self.first + end - 1)
        numbers = self.numbers[start:end]
        first, last = numbers[0], numbers[-1]
        return IdSequence(
            self.prefix, first, last, None if last - first == end - start - 1 else numbers
        )


class Run:
    """The ids of one recorded batch with a sequence of ids (or of a piece of it), and
    where it was stored. `group` is every run of that batch, in offset order: they
    expire together."""

    __slots__ = ("base_offset", "first", "group", "last", "numbers")

    def __init__(self, sequence: IdSequence, base_offset: int, group: list[Run]) -> None:
        self.first = sequence.first
        self.last = sequence.last
        self.numbers = sequence.numbers
        self.base_offset = base_offset
        self.group = group

    def sequence(self, prefix: str) -> IdSequence:
        return IdSequence(prefix, self.first, self.last, self.numbers)

    @property
    def count(self) -> int:
        return self.last - self.first + 1 if self.numbers is None else len(self.numbers)

    def offset_of(self, number: int) -> int | None:
        if number < self.first or number > self.last:
            return None
        if self.numbers is None:
            return self.base_offset + number - self.first
        i = bisect.bisect_left(self.numbers, number)
        if i < len(self.numbers) and self.numbers[i] == number:
            return self.base_offset + i
        return None


class PrefixRuns:
    """Everything remembered of one prefix's sequence ids: its runs, and a bound on
    those of its ids that the window keeps in its dictionary instead."""

    __slots__ = ("dict_high", "dict_low", "highest", "in_dict", "runs")

    def __init__(self) -> None:
        self.runs: list[Run] = []  # disjoint spans of numbers, in number order
        self.highest = -1  # the highest number recorded, in runs or in the dictionary
        self.in_dict = 0  # how many of its ids are in the dictionary
        # Every number of its ids in the dictionary lies within [dict_low, dict_high]
        # (widened as ids come, reset once none is left).
        self.dict_low = MAX_SEQUENCE + 1
        self.dict_high = -1

    def fit(self, sequence: IdSequence) -> list[tuple[Run, list[int]]] | None:
        """The remembered runs to cut (before which of their rows) so that every number
        of `sequence` falls in a gap between runs ([] if none), or None when a number of
        it may be remembered (or it would take too many cuts)."""
        if sequence.first > self.highest:
            return []
        first, last = sequence.first, sequence.last
        if self.in_dict and first <= self.dict_high and last >= self.dict_low:
            return None
        start, end = self._reached(first, last)
        if end - start > MAX_RUNS_CROSSED:
            return None
        cuts: list[tuple[Run, list[int]]] = []
        pieces = 0
        for run in self.runs[start:end]:
            low, high = sequence.first_row_from(run.first), sequence.first_row_from(run.last + 1)
            if low == high:
                continue  # no number of the batch within the run's span
            if run.numbers is None:
                return None  # the run holds every number of its span
            ours = _numbers(sequence, low, high)
            theirs = np.frombuffer(run.numbers, np.int64)
            rows = np.searchsorted(theirs, ours)
            if np.any(theirs[np.minimum(rows, len(theirs) - 1)] == ours):
                return None
            at = np.unique(rows).tolist()
            pieces += len(at)
            if pieces > MAX_RUNS_CROSSED:
                return None
            cuts.append((run, at))
        return cuts

    def cut(self, run: Run, rows: list[int], prefix: str) -> None:
        """Cut `run` before each of `rows` (ascending, inside it) into runs of its group."""
        sequence = run.sequence(prefix)
        bounds = [0, *rows, sequence.count]
        pieces = [
            Run(sequence.piece(a, b), run.base_offset + a, run.group)
            for a, b in itertools.pairwise(bounds)
        ]
        i = bisect.bisect_left(self.runs, run.first, key=_first)
        self.runs[i : i + 1] = pieces
        g = run.group.index(run)
        run.group[g : g + 1] = pieces

    def _reached(self, first: int, last: int) -> tuple[int, int]:
        """runs[start:end] are those whose span reaches into `first` to `last`."""
        runs = self.runs
        end = bisect.bisect_right(runs, last, key=_first)  # runs[:end] start at or below last
        start = bisect.bisect_right(runs, first, key=_first) - 1
        if start < 0 or runs[start].last < first:
            start += 1
        return start, end

    def gaps(self, sequence: IdSequence) -> list[int] | None:
        """Where `sequence` is cut so that each piece fills one gap between remembered
        runs (the rows that start the second piece onwards; [] for one piece), or None
        when a number of it may be remembered. Asked once `fit` said it fits and its
        cuts are made (so the runs it crosses are bounded: no limit of its own)."""
        first, last = sequence.first, sequence.last
        if first > self.highest:
            return []
        if self.in_dict and first <= self.dict_high and last >= self.dict_low:
            return None
        start, end = self._reached(first, last)
        cuts: list[int] = []
        count = sequence.count
        for run in self.runs[start:end]:
            row = sequence.first_row_from(run.first)
            if row < count and sequence.number(row) <= run.last:
                return None  # a number of the batch inside the run's span
            if 0 < row < count and (not cuts or cuts[-1] != row):
                cuts.append(row)
        return cuts

    def add(self, run: Run) -> None:
        """Keep `run` (in a gap between the remembered runs) in number order."""
        runs = self.runs
        if not runs or run.first > runs[-1].last:
            runs.append(run)
        else:
            runs.insert(bisect.bisect_right(runs, run.first, key=_first), run)
        self.highest = max(self.highest, run.last)

    def remove(self, run: Run) -> None:
        """Forget `run` (expired, or recorded for an append that never became durable)."""
        runs = self.runs
        i = bisect.bisect_left(runs, run.first, key=_first)
        assert runs[i] is run
        del runs[i]

    def offset_of(self, number: int) -> int | None:
        """The offset its runs stored `number` at, or None."""
        runs = self.runs
        if number > self.highest or not runs:
            return None
        i = bisect.bisect_right(runs, number, key=_first) - 1
        return runs[i].offset_of(number) if i >= 0 else None

    def remember_dict_number(self, number: int) -> None:
        """One of its ids went into the dictionary."""
        self.in_dict += 1
        self.highest = max(self.highest, number)
        self.dict_low = min(self.dict_low, number)
        self.dict_high = max(self.dict_high, number)

    def forget_dict_id(self) -> None:
        """One of its ids left the dictionary."""
        self.in_dict -= 1
        if not self.in_dict:
            self.dict_low, self.dict_high = MAX_SEQUENCE + 1, -1


def _first(run: Run) -> int:
    return run.first


def _numbers(sequence: IdSequence, start: int, end: int) -> np.ndarray:
    """The numbers of rows `start` to `end` (exclusive) of `sequence`."""
    if sequence.numbers is None:
        return np.arange(sequence.first + start, sequence.first + end, dtype=np.int64)
    return np.frombuffer(sequence.numbers, np.int64)[start:end]
