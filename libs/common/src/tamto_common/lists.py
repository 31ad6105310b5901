"""The one check of how many elements a list in a request holds.

Every list a client controls has an upper bound (`tamto_protocol.limits`, and
a stream's most partitions); an adapter checks it with `check_count` before any
work per element, so a request over it costs O(1) and is refused with
INVALID_ARGUMENT naming the field and the limit (docs/validation.md).
"""

from __future__ import annotations

from tamto_common.errors import InvalidArgument


def check_count(field: str, count: int, limit: int) -> None:
    """INVALID_ARGUMENT naming `field` when its list holds more than `limit` elements."""
    if count > limit:
        raise InvalidArgument(f"{field} has {count} elements; at most {limit} are allowed")
