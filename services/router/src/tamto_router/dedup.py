"""The dedup window of one partition: message ids seen recently, and their offsets.

A message whose `id` was stored within the stream's dedup window is not stored
again; its producer gets the original offset back. Producers of the SDK give
every message an id (`<producer>:<sequence>`) unless the application set one,
so a batch retried after a lost connection never duplicates.

Two kinds of id are remembered differently, with the same exact semantics:

- A *sequence id* ``<prefix>:<n>`` (``n`` a canonical decimal below 10^18) is
  remembered in *runs*: one run per batch whose ids share a prefix and have
  strictly increasing numbers, holding the numbers and the offset of the first
  row (`tamto_router.dedup_runs`). A batch of an idempotent producer is
  recognised as a run with a few vectorised passes (pyarrow compute), and it
  is new without looking up any id when its numbers all fall in gaps between
  its prefix's remembered runs (above them all, for one producer in order; a
  bisection per run its span reaches, for results reaching a partition out of
  order from several processing instances). No per-id Python on the hot path,
  in `plan` or in `record`.
- Any other id (and a sequence id whose batch reaches into a remembered run's
  span, e.g. an application's out-of-order ``order:17``, or two producers'
  interleaved numbers) goes into a dictionary, one lookup per id, which is
  what dedup of arbitrary ids is.

A batch that is not a fresh run (a retry, repeats, mixed ids) is planned id by
id against both. A batch without ids is skipped by one null count. The window
is rebuilt from the log when a router takes a partition over, and kept (cut
back to the log's end, `truncate`) when the same router reopens it with no other
owner in between (storage restarted, the ownership lease was granted again).
"""

from __future__ import annotations

import array
import itertools
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tamto_protocol.batch import int64_scalar, prefixed_numbers, sequence_ids
from tamto_router.dedup_runs import MAX_SEQUENCE, IdSequence, PrefixRuns, Run

#: A sequence id, as `split_sequence_id` reads it (RE2: the prefix is up to the last ':').
_SEQUENCE_ID = r"(?s)^(?P<prefix>.*):(?P<n>0|[1-9][0-9]{0,17})$"


def split_sequence_id(message_id: str) -> tuple[str, int] | None:
    """``(prefix, n)`` if `message_id` is ``<prefix>:<n>`` with canonical decimal `n`."""
    prefix, sep, digits = message_id.rpartition(":")
    if (
        not sep
        or not digits
        or len(digits) > 18
        or not digits.isascii()
        or not digits.isdigit()
        or (digits[0] == "0" and len(digits) > 1)
    ):
        return None
    return prefix, int(digits)


def id_sequence(ids: pa.Array) -> IdSequence | None:
    """The batch's ids as an `IdSequence`, or None if they are not one (vectorised)."""
    n = len(ids)
    if n == 0 or ids.null_count:
        return None
    head = split_sequence_id(ids[0].as_py())
    if head is None:
        return None
    prefix, first = head
    if n == 1:
        return IdSequence(prefix, first, first)
    if first + n - 1 <= MAX_SEQUENCE and ids.equals(sequence_ids(prefix, first, n)):
        return IdSequence(prefix, first, first + n - 1)
    tail = split_sequence_id(ids[n - 1].as_py())
    if tail is None or tail[0] != prefix or tail[1] <= first:
        return None
    try:
        numbers = pc.cast(pc.utf8_slice_codeunits(ids, len(prefix) + 1), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if not ids.equals(prefixed_numbers(prefix, numbers)):
        return None
    # Strictly increasing, so every number lies between the first and the last,
    # which split_sequence_id accepted: each id is a sequence id on its own too.
    if not pc.all(pc.greater(numbers.slice(1), numbers.slice(0, n - 1))).as_py():
        return None
    return IdSequence(prefix, first, tail[1], array.array("q", numbers.to_pylist()))


@dataclass(frozen=True)
class DedupPlan:
    """What to do with one batch: which rows to store, and the offsets of the others."""

    keep: pa.Array | None  # boolean mask of rows to store; None: store all
    kept: int  # how many rows are stored
    duplicates: dict[int, int]  # row -> original offset
    #: Set when every row is new and the ids form a sequence (`record` reuses it).
    sequence: IdSequence | None = None


class DedupWindow:
    """Ids and offsets of messages stored within the last `window_us`."""

    def __init__(self, window_us: int) -> None:
        self.window_us = window_us
        # id -> (offset, time, prefix if it is a sequence id)
        self._seen: OrderedDict[str, tuple[int, int, str | None]] = OrderedDict()
        self._prefixes: dict[str, PrefixRuns] = {}
        # (time, prefix, the runs of one recorded batch) in record order
        self._runs: deque[tuple[int, str, list[Run]]] = deque()
        self._run_ids = 0

    def __len__(self) -> int:
        return len(self._seen) + self._run_ids

    def _expire(self, now_us: int) -> None:
        horizon = now_us - self.window_us
        seen = self._seen
        while seen:
            first = next(iter(seen.values()))
            if first[1] >= horizon:
                break
            seen.popitem(last=False)
            if first[2] is not None:
                state = self._prefixes[first[2]]
                state.forget_dict_id()
                self._forget_if_empty(first[2], state)
        runs = self._runs
        while runs and runs[0][0] < horizon:
            _, prefix, group = runs.popleft()
            state = self._prefixes[prefix]
            for run in group:
                state.remove(run)
                self._run_ids -= run.count
            self._forget_if_empty(prefix, state)

    def _forget_if_empty(self, prefix: str, state: PrefixRuns) -> None:
        if not state.runs and not state.in_dict:
            del self._prefixes[prefix]

    def plan(self, ids: pa.Array, now_us: int) -> DedupPlan:
        """Classify a batch's rows; duplicates within the batch keep the first copy."""
        n = len(ids)
        if ids.null_count == n:
            return DedupPlan(None, n, {})
        self._expire(now_us)
        sequence = id_sequence(ids)
        if sequence is not None:
            state = self._prefixes.get(sequence.prefix)
            if state is None or state.fit(sequence) is not None:
                return DedupPlan(None, n, {}, sequence)  # all new: nothing to look up
        duplicates: dict[int, int] = {}
        first_in_batch: dict[str, int] = {}
        for row, message_id in enumerate(ids.to_pylist()):
            if message_id is None:
                continue
            original = self._lookup(message_id)
            if original is not None:
                duplicates[row] = original
            elif message_id in first_in_batch:
                duplicates[row] = -1 - first_in_batch[message_id]  # resolved after sequencing
            else:
                first_in_batch[message_id] = row
        if not duplicates:
            return DedupPlan(None, n, {}, sequence)
        flags = array.array("b", [row not in duplicates for row in range(n)])
        # Built from a buffer: converting Python objects would make pyarrow import pandas.
        keep = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(flags)]).cast(pa.bool_())
        return DedupPlan(keep, n - len(duplicates), duplicates)

    def _lookup(self, message_id: str) -> int | None:
        """The offset a remembered id was stored at, or None."""
        seen = self._seen.get(message_id)
        if seen is not None:
            return seen[0]
        split = split_sequence_id(message_id)
        if split is None:
            return None
        state = self._prefixes.get(split[0])
        return state.offset_of(split[1]) if state is not None else None

    def record(
        self,
        ids: pa.Array,
        offsets: Sequence[int],
        time_us: int,
        sequence: IdSequence | None = None,
    ) -> None:
        """Remember the ids of stored rows (`offsets[i]` is row i's offset, ascending).

        `sequence` is the plan's `IdSequence` of these ids, if it found one.
        """
        n = len(ids)
        if ids.null_count == n:
            return
        if sequence is None:
            sequence = id_sequence(ids)
        if sequence is not None and offsets[n - 1] - offsets[0] == n - 1:
            state = self._prefixes.get(sequence.prefix)
            if state is None:
                state = self._prefixes[sequence.prefix] = PrefixRuns()
            fit = state.fit(sequence)
            if fit is not None:  # none is remembered yet: a run per gap it fills
                for run, rows in fit:
                    state.cut(run, rows, sequence.prefix)
                cuts = state.gaps(sequence)
                assert cuts is not None
                self._add_runs(sequence, state, cuts, offsets[0], time_us)
                return
        for message_id, offset in zip(ids.to_pylist(), offsets, strict=True):
            self._remember(message_id, offset, time_us)

    def _add_runs(
        self, sequence: IdSequence, state: PrefixRuns, cuts: list[int], base: int, time_us: int
    ) -> None:
        """Remember `sequence`, stored from offset `base`, as one run per piece between
        `cuts` (rows; each piece in a gap between the prefix's runs)."""
        group: list[Run] = []
        bounds = [0, *cuts, sequence.count]
        for start, end in itertools.pairwise(bounds):
            run = Run(sequence.piece(start, end), base + start, group)
            group.append(run)
            state.add(run)
        self._runs.append((time_us, sequence.prefix, group))
        self._run_ids += sequence.count

    def _remember(self, message_id: str | None, offset: int, time_us: int) -> None:
        """Record one id in the dictionary, unless it is remembered already."""
        if message_id is None or self._lookup(message_id) is not None:
            return
        split = split_sequence_id(message_id)
        if split is not None:
            state = self._prefixes.get(split[0])
            if state is None:
                state = self._prefixes[split[0]] = PrefixRuns()
            state.remember_dict_number(split[1])
        self._seen[message_id] = (offset, time_us, split[0] if split else None)

    def record_log(self, ids: pa.Array, base_offset: int, times_us: npt.NDArray[np.int64]) -> None:
        """Remember the ids of a stretch of the stored log: row i at `base_offset + i`,
        stored at `times_us[i]` (rebuilding the window on a takeover).

        The same as `record` batch by batch, without its per-batch cost: one regular
        expression over every id finds the sequence ids, and vectorised comparisons
        cut them into runs (consecutive rows of one prefix with consecutive numbers,
        which may span several stored batches of one producer). A run that does not
        extend its prefix, and ids that are not sequence ids, take `record`'s per-id
        path. A run is timed by its last row, so it is kept at least as long as each
        of its ids.
        """
        n = len(ids)
        if n == 0 or ids.null_count == n:
            return
        parts = pc.extract_regex(ids, _SEQUENCE_ID)
        numbers = pc.cast(pc.struct_field(parts, "n"), pa.int64())
        matched = _true_rows(pc.is_valid(numbers))
        prefixes = pc.struct_field(parts, "prefix")
        # A run starts where the previous row is not the same prefix's next number.
        follows = pc.and_(
            pc.equal(prefixes.slice(1), prefixes.slice(0, n - 1)),
            pc.equal(numbers.slice(1), pc.add(numbers.slice(0, n - 1), int64_scalar(1))),
        )
        breaks = np.flatnonzero(np.concatenate(([True], ~_true_rows(follows))))
        ends = np.append(breaks[1:], n)
        for start, end in zip(breaks.tolist(), ends.tolist(), strict=True):
            if not matched[start]:
                continue
            prefix = prefixes[start].as_py()
            first = numbers[start].as_py()
            state = self._prefixes.get(prefix)
            if state is None:
                state = self._prefixes[prefix] = PrefixRuns()
            time_us = int(times_us[end - 1])
            if first > state.highest:
                sequence = IdSequence(prefix, first, first + end - start - 1)
                self._add_runs(sequence, state, [], base_offset + start, time_us)
            else:
                self.record(
                    ids.slice(start, end - start),
                    range(base_offset + start, base_offset + end),
                    time_us,
                )
        others = np.flatnonzero(~matched & _true_rows(pc.is_valid(ids)))
        if len(others):  # ids that are not sequence ids: one lookup each
            rows = pa.Array.from_buffers(pa.int64(), len(others), [None, pa.py_buffer(others)])
            other_ids = ids.take(rows).to_pylist()
            for row, message_id in zip(others.tolist(), other_ids, strict=True):
                self._remember(message_id, base_offset + row, int(times_us[row]))

    def truncate(self, end: int) -> int:
        """Forget every id remembered at offset `end` or beyond; returns how many.

        A partition reopened by the owner that recorded this window (storage
        restarted, the lease was granted again, no other owner in between) keeps
        it: what the log stored below its end is what the window recorded, but ids
        recorded for appends that never became durable would answer a retry with
        an offset the log does not have. Offsets grow in record order, so those
        are the newest entries.
        """
        dropped = 0
        touched: set[str] = set()
        seen = self._seen
        while seen:
            _message_id, (offset, _, prefix) = next(reversed(seen.items()))
            if offset < end:
                break
            seen.popitem(last=True)
            dropped += 1
            if prefix is not None:
                self._prefixes[prefix].forget_dict_id()
                touched.add(prefix)
        runs = self._runs
        while runs:
            _, prefix, group = runs[-1]
            state = self._prefixes[prefix]
            run = group[-1]  # its runs are in offset order
            if run.base_offset + run.count <= end:
                break
            touched.add(prefix)
            kept = max(0, end - run.base_offset)
            dropped += run.count - kept
            self._run_ids -= run.count - kept
            if kept == 0:
                state.remove(run)
                group.pop()
                if not group:
                    runs.pop()
                continue
            # Part of one batch stored (not done by storage, which appends whole
            # batches; kept exact anyway): the run keeps its first `kept` ids.
            if run.numbers is None:
                run.last = run.first + kept - 1
            else:
                run.numbers = run.numbers[:kept]
                run.last = run.numbers[-1]
            break
        if touched:
            self._recompute_highest(touched)
        return dropped

    def _recompute_highest(self, prefixes: set[str]) -> None:
        """The highest number of each of `prefixes` from what is still remembered."""
        highest = {p: -1 for p in prefixes}
        for p in prefixes:
            state = self._prefixes[p]
            if state.runs:
                highest[p] = state.runs[-1].last
        if any(self._prefixes[p].in_dict for p in prefixes):
            for message_id, (_, _, prefix) in self._seen.items():
                if prefix in highest:
                    split = split_sequence_id(message_id)
                    assert split is not None
                    highest[prefix] = max(highest[prefix], split[1])
        for p, value in highest.items():
            state = self._prefixes[p]
            state.highest = value
            self._forget_if_empty(p, state)


def _true_rows(flags: pa.BooleanArray) -> npt.NDArray[np.bool_]:
    """Which rows of `flags` are true (not false, not null), read from its bitmaps:
    `to_numpy` on a boolean array, and `fill_null` with a Python value, import pandas
    (seconds, on the event loop, the first time)."""
    if len(flags) == 0:
        return np.zeros(0, np.bool_)
    data, validity = flags.buffers()[1], flags.buffers()[0]
    span = slice(flags.offset, flags.offset + len(flags))
    rows = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[span]
    if validity is not None:
        rows &= np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")[span]
    return rows.astype(np.bool_)


def message_offsets(plan: DedupPlan, rows: int, base: int) -> list[int]:
    """The offset of every row of the original batch, once kept rows start at `base`."""
    out: list[int] = []
    next_offset = base
    for row in range(rows):
        original = plan.duplicates.get(row)
        if original is None:
            out.append(next_offset)
            next_offset += 1
        elif original < 0:
            out.append(out[-1 - original])  # a repeat of an earlier row in this batch
        else:
            out.append(original)
    return out
