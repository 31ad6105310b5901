"""Domain values the storage service passes around (never protobuf types)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PartitionId:
    """One partition of one stream."""

    stream: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream}/{self.partition}"


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A sequenced batch: the producer's Arrow IPC bytes plus what the router assigned.

    A batch read from the WAL holds a view of the file's mapping, not bytes of
    its own (see `wal_frames.read_frames`): use it and drop it, do not keep it.
    """

    base_offset: int
    count: int
    publish_time_us: int
    arrow_ipc: bytes | memoryview

    @property
    def end_offset(self) -> int:
        """The offset just past this batch's last message."""
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Where a partition's log starts and ends."""

    start_offset: int
    next_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Batches covering a read, and the offset to continue reading from."""

    batches: tuple[StoredBatch, ...]
    next_offset: int


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Inclusive range of offsets."""

    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Cursor:
    """A subscription's durable position: all below ack_floor acked, plus ranges above it."""

    ack_floor: int
    acked_above_floor: tuple[OffsetRange, ...] = ()
    #: Messages delivered again and moved to the dead-letter stream, as the owning
    #: router counted them (they only grow; kept so they outlive the router).
    redeliveries: int = 0
    dead_lettered: int = 0
