"""What the WAL knows about each stored batch without reading it: one entry per frame."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tamto_common.errors import DataCorruption
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

    def error(self) -> DataCorruption:
        return DataCorruption(
            f"partition log corrupt from offset {self.offset}: {self.reason} "
            f"in {self.file} at byte {self.position}"
        )
