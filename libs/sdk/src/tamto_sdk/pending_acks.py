"""What a consumer owes the server: acks, nacks and verbs not yet written, as ranges.

Acks are kept as offset runs per partition, the newest run open as two ints, so acking
message after message in order moves one int (`Consumer.ack`'s per-message path reads
`PendingAcks.acks` directly for that). Every request is cut to the servers' limit of
ranges per request (`tamto_protocol.limits.MAX_RANGES_PER_REQUEST`).
"""

from __future__ import annotations

from typing import Any

from tamto_protocol.limits import MAX_RANGES_PER_REQUEST
from tamto_protocol.offset_ranges import merge_ranges
from tamto_protocol.v1 import messages_pb2
from tamto_sdk.errors import UndecodableBatch
from tamto_sdk.messages import Message, MessageBatch

__all__ = ["OffsetRuns", "PendingAcks", "merge_ranges", "ranges_of", "within_limit"]


class OffsetRuns:
    """One partition's pending acks as inclusive offset runs. The newest run stays
    open as two ints, so acking message after message in order only moves `last`."""

    __slots__ = ("closed", "first", "last")

    def __init__(self, first: int, last: int) -> None:
        self.closed: list[tuple[int, int]] = []
        self.first = first
        self.last = last

    def add(self, first: int, last: int) -> None:
        """Add the run ``first..last``: it extends the open run when it starts inside
        or right after it, else the open run is closed and this one opens."""
        if self.first <= first <= self.last + 1:
            self.last = max(self.last, last)
        else:
            self.closed.append((self.first, self.last))
            self.first, self.last = first, last

    def merged(self) -> list[tuple[int, int]]:
        """Every run, sorted, with overlapping or touching runs merged."""
        if not self.closed:
            return [(self.first, self.last)]
        return merge_ranges([*self.closed, (self.first, self.last)])


def within_limit(ranges: list[Any]) -> list[list[Any]]:
    """`ranges` in pieces of at most `MAX_RANGES_PER_REQUEST` (a server refuses a
    request with more)."""
    step = MAX_RANGES_PER_REQUEST
    return [ranges[i : i + step] for i in range(0, len(ranges), step)]


def ranges_of(item: Message | MessageBatch | UndecodableBatch) -> list[Any]:
    """The offsets of a message or batch as wire `OffsetRange`s."""
    if isinstance(item, MessageBatch | UndecodableBatch):
        runs = item.offset_ranges()
    else:
        runs = [(item.offset, item.offset)]
    return [messages_pb2.OffsetRange(first=f, last=la) for f, la in runs]


class PendingAcks:
    """What a consumer owes the server and has not written yet: acks as offset runs per
    partition (resent on a new session), nacks per partition and delay, and term and
    in-progress requests (both dropped on a new session, which redelivers their
    messages anyway)."""

    __slots__ = ("acks", "nacks", "verbs", "writing")

    def __init__(self) -> None:
        self.acks: dict[int, OffsetRuns] = {}
        self.nacks: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.verbs: list[Any] = []
        #: The writer holds requests taken from here and not yet written.
        self.writing = False

    def has_pending(self) -> bool:
        """Whether anything is not yet written, counting what the writer is writing."""
        return bool(self.acks or self.nacks or self.verbs or self.writing)

    def add_ack(self, partition: int, first: int, last: int) -> None:
        runs = self.acks.get(partition)
        if runs is None:
            self.acks[partition] = OffsetRuns(first, last)
        else:
            runs.add(first, last)

    def add_nack(self, partition: int, delay_ms: int, ranges: list[tuple[int, int]]) -> None:
        self.nacks.setdefault((partition, delay_ms), []).extend(ranges)

    def take_acks(self) -> list[Any]:
        """Every pending ack as `ConsumeRequest`s (each under the range limit), cleared."""
        requests: list[Any] = []
        for partition, runs in sorted(self.acks.items()):
            merged = [messages_pb2.OffsetRange(first=f, last=la) for f, la in runs.merged()]
            requests.extend(
                messages_pb2.ConsumeRequest(
                    ack=messages_pb2.PartitionAcks(partition=partition, ranges=ranges)
                )
                for ranges in within_limit(merged)
            )
        self.acks.clear()
        return requests

    def take_nacks(self) -> list[Any]:
        """Every pending nack as `ConsumeRequest`s (each under the range limit), cleared."""
        requests: list[Any] = []
        for (partition, delay_ms), ranges in sorted(self.nacks.items()):
            merged = [messages_pb2.OffsetRange(first=f, last=la) for f, la in merge_ranges(ranges)]
            requests.extend(
                messages_pb2.ConsumeRequest(
                    nack=messages_pb2.PartitionNacks(
                        partition=partition, ranges=chunk, delay_ms=delay_ms
                    )
                )
                for chunk in within_limit(merged)
            )
        self.nacks.clear()
        return requests

    def take_verbs(self) -> list[Any]:
        verbs, self.verbs = self.verbs, []
        return verbs

    def new_session(self) -> None:
        """A new session redelivers what was nacked or termed and not sent: drop those."""
        self.nacks.clear()
        self.verbs.clear()
