"""Rules for the fields of a Subscribe and of the requests after it (each ack's,
nack's, term's and in_progress's `ranges`), checked where a consume stream enters
(the gateway) and again by the router, which other services may reach directly.
A list over its limit (`tamto_protocol.limits`) is refused before any work per
element.

Each breach is INVALID_ARGUMENT naming the field and the rule, instead of being
accepted silently (a start time of -1 or 2^63-1, `partitions: [0, 0, 0]`) or
stored and logged whatever its size (a 10 KiB consumer name).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tamto_common.errors import InvalidArgument
from tamto_common.lists import check_count
from tamto_common.streams import MAX_PARTITIONS
from tamto_protocol.limits import MAX_RANGES_PER_REQUEST

#: Longest consumer name, in characters: it is logged, and orders failover consumers.
MAX_CONSUMER_NAME_CHARS = 256
#: Longest consumer id, in characters (the SDK's are 32 hex digits).
MAX_CONSUMER_ID_CHARS = 64
#: Latest start time accepted: 9999-12-31T23:59:59.999999Z, in µs since the epoch.
MAX_START_TIME_US = 253_402_300_799_999_999


def check_consumer_name(name: str) -> str:
    """`name` if it is at most `MAX_CONSUMER_NAME_CHARS` printable characters (empty is fine)."""
    return _printable_up_to("consumer_name", name, MAX_CONSUMER_NAME_CHARS)


def check_consumer_id(consumer_id: str) -> str:
    """`consumer_id` if it is at most `MAX_CONSUMER_ID_CHARS` printable characters
    (empty is fine: a consumer without one never takes another session's place)."""
    return _printable_up_to("consumer_id", consumer_id, MAX_CONSUMER_ID_CHARS)


def _printable_up_to(field: str, value: str, most: int) -> str:
    if len(value) > most:
        raise InvalidArgument(f"{field} has {len(value)} characters; at most {most} are allowed")
    if not value.isprintable():
        raise InvalidArgument(f"{field} must not contain control characters")
    return value


def check_start_time_us(time_us: int) -> int:
    """`time_us` if it is a time from the epoch to the end of year 9999, in µs."""
    if not 0 <= time_us <= MAX_START_TIME_US:
        raise InvalidArgument(
            f"start.time_us must be from 0 to {MAX_START_TIME_US} (µs since the epoch, "
            f"up to 9999-12-31), got {time_us}"
        )
    return time_us


def check_range_count(field: str, count: int) -> None:
    """A consume request's `ranges` hold at most `MAX_RANGES_PER_REQUEST` ranges."""
    check_count(field, count, MAX_RANGES_PER_REQUEST)


def check_partitions(partitions: Sequence[int]) -> tuple[int, ...]:
    """The partitions sorted, if none is listed twice and they are at most
    `MAX_PARTITIONS` (a stream's most partitions)."""
    check_count("partitions", len(partitions), MAX_PARTITIONS)
    ordered = sorted(partitions)
    for previous, current in itertools.pairwise(ordered):
        if previous == current:
            raise InvalidArgument(f"partitions lists partition {current} more than once")
    return tuple(ordered)
