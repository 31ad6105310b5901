"""Key-shared bookkeeping: which consumer holds each key, and which keys wait.

Order per key holds when a message of a key is handed out only if

- no *other* consumer still has an unacknowledged message of that key in
  flight (a key that moved on the ring is not handed over until its old
  consumer acked or gave back what it had), and
- no *earlier* message of that key is waiting to be delivered again (nacked,
  timed out, or given back by a consumer that left).

The second rule must hold between dispatch rounds, not only within one: a
consumer can leave (or nack) while the dispatcher is reading the log, and the
messages it gives back must still block the later messages of their keys that
the dispatcher is about to hand out. So the keys of given-back messages are
remembered here, synchronously, at the moment they are given back.

Only offsets that were delivered are tracked: a few per consumer's credit.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from tamto_router.acks import normalized

Key = bytes | None


class KeyHolds:
    def __init__(self) -> None:
        self._in_flight: dict[int, Key] = {}  # offset -> key, delivered and unacked
        self._holder: dict[Key, tuple[int, int]] = {}  # key -> (slot id, messages in flight)
        self._waiting: dict[int, Key] = {}  # offset -> key, given back, to deliver again
        self._waiting_by_key: dict[Key, set[int]] = {}

    def may_deliver(self, offset: int, key: Key, slot_id: int) -> bool:
        """Whether `offset` (of `key`) may go to consumer `slot_id` now."""
        holder = self._holder.get(key)
        if holder is not None and holder[0] != slot_id:
            return False
        waiting = self._waiting_by_key.get(key)
        return not waiting or min(waiting) >= offset

    def deliver(self, offset: int, key: Key, slot_id: int) -> None:
        """`offset` went to `slot_id`: it holds `key` until the offset is settled."""
        self._unwait(offset)
        self._in_flight[offset] = key
        holder = self._holder.get(key)
        self._holder[key] = (slot_id, 1 if holder is None else holder[1] + 1)

    def give_back(self, first: int, last: int) -> None:
        """Delivered offsets in [first, last] come back for redelivery: their keys
        stop being held by the consumer and wait for them instead."""
        for offset in self._tracked(self._in_flight, first, last):
            key = self._drop_in_flight(offset)
            self._waiting[offset] = key
            self._waiting_by_key.setdefault(key, set()).add(offset)

    def settle(self, first: int, last: int) -> None:
        """Offsets in [first, last] are done (acked or dead-lettered)."""
        self.settle_ranges([(first, last)])

    def settle_ranges(self, ranges: list[tuple[int, int]]) -> None:
        """Offsets in the sorted, disjoint inclusive `ranges` are done.

        One pass for all of them: the offsets of the ranges when they are fewer
        than those tracked, else each tracked offset looked up among the ranges
        (O(t log k)), never a pass over the tracked offsets per range.
        """
        for offset in _within(self._in_flight, ranges):
            self._drop_in_flight(offset)
        for offset in _within(self._waiting, ranges):
            self._unwait(offset)

    def keep_waiting_only(self, runs: Iterable[tuple[int, int]]) -> None:
        """Forget waiting offsets outside `runs` (the subscription's pending runs).

        A safety net: whatever path took an offset out of the pending runs
        without settling or delivering it must not stall its key for good.
        """
        spans = normalized(runs)
        firsts = [first for first, _ in spans]
        for offset in [o for o in self._waiting if not _covered(spans, firsts, o)]:
            self._unwait(offset)

    def _drop_in_flight(self, offset: int) -> Key:
        key = self._in_flight.pop(offset)
        slot_id, count = self._holder[key]
        if count <= 1:
            del self._holder[key]
        else:
            self._holder[key] = (slot_id, count - 1)
        return key

    def _unwait(self, offset: int) -> None:
        if offset not in self._waiting:
            return
        key = self._waiting.pop(offset)
        offsets = self._waiting_by_key[key]
        offsets.discard(offset)
        if not offsets:
            del self._waiting_by_key[key]

    @staticmethod
    def _tracked(offsets: dict[int, Key], first: int, last: int) -> list[int]:
        if last - first > len(offsets):
            return [o for o in offsets if first <= o <= last]
        return [o for o in range(first, last + 1) if o in offsets]


def _within(offsets: dict[int, Key], ranges: list[tuple[int, int]]) -> list[int]:
    """The offsets of `offsets` inside the sorted, disjoint inclusive `ranges`."""
    if sum(last - first + 1 for first, last in ranges) <= len(offsets):
        return [o for first, last in ranges for o in range(first, last + 1) if o in offsets]
    firsts = [first for first, _ in ranges]
    found = []
    for offset in offsets:
        i = bisect.bisect_right(firsts, offset) - 1
        if i >= 0 and offset <= ranges[i][1]:
            found.append(offset)
    return found


def _covered(spans: list[tuple[int, int]], firsts: list[int], offset: int) -> bool:
    """Whether `offset` is in one of the sorted, disjoint `spans` (`firsts`: their starts)."""
    i = bisect.bisect_right(firsts, offset) - 1
    return i >= 0 and offset <= spans[i][1]
