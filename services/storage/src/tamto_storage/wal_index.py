"""What the WAL knows about each stored batch without reading it: one entry per frame."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tamto_common.errors import DataLoss, damaged_offsets_error
from tamto_storage.frame import HEADER_SIZE


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where one batch's frame sits: enough to find it by offset and read it in one go."""

    base_offset: int
    count: int
    publish_time_us: int
    epoch: int
    file: Path
    position: int  # byte offset of the frame header in `file`
    body_length: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def frame_length(self) -> int:
        return HEADER_SIZE + self.body_length


@dataclass(frozen=True, slots=True)
class Corruption:
    """The first place a partition's log cannot be trusted; nothing at or after it is served."""

    offset: int  # the first offset that cannot be served
    file: Path
    position: int
    reason: str
    #: Where the frames that still check out after the damage end, when recovery
    #: looked (None: not looked for). The partition reports its end there.
    known_end: int | None = None

    def error(self) -> DataLoss:
        """DATA_LOSS naming the file and the first offset lost (the end is not known:
        nothing after the damage is trusted until `tamto storage repair`)."""
        return damaged_offsets_error(
            str(self.file),
            self.offset,
            None,
            f"{self.reason} at byte {self.position}; "
            f"the partition's log is readable below offset {self.offset}",
        )


@dataclass(slots=True)
class WalFileSummary:
    """A WAL file's durable batches: where they start and end, their bytes (frames), and
    the newest one's publish time. `Wal.sealed_files` lists the files wholly sealed."""

    first_offset: int
    end_offset: int
    size: int
    newest_publish_us: int

    def add(self, entry: IndexEntry) -> None:
        self.end_offset = entry.end_offset
        self.size += entry.frame_length
        self.newest_publish_us = max(self.newest_publish_us, entry.publish_time_us)
