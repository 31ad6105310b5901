"""The router's domain values: what its modules pass each other, free of protobuf.

The storage adapter (`storage_client`) converts storage's wire types into these
at its edge, as storage's own `model.py` does for its service.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Batch:
    """A sequenced batch: the producer's Arrow bytes and what the router assigned."""

    base_offset: int
    count: int
    publish_time_us: int
    arrow_ipc: bytes

    @property
    def end(self) -> int:
        """One past the last offset."""
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class LogBounds:
    """A partition's readable range as storage reported it: [start_offset, next_offset)."""

    start_offset: int
    next_offset: int
