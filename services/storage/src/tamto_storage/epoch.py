"""The owner epoch of a partition, stored durably in ``<partition-dir>/_epoch``.

The file holds the epoch as decimal text with its checksum (``7 crc32:<hex>``,
`tamto_protocol.checked`; a bare number, written before checksums, reads too)
and is replaced atomically. Blocking:
call through a thread.
"""

from __future__ import annotations

from pathlib import Path

from tamto_common.durable import write_atomic
from tamto_common.errors import DataLoss
from tamto_protocol.checked import line_checked, parse_line_checked

FILE_NAME = "_epoch"


def load_epoch(partition_dir: Path) -> int:
    """The stored epoch, 0 when none was ever stored."""
    path = partition_dir / FILE_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return 0
    try:
        return int(parse_line_checked(raw.decode()))
    except ValueError:  # UnicodeDecodeError too
        raise DataLoss(
            f"epoch file {path} holds {raw[:40]!r}, not an integer with its checksum"
        ) from None


def store_epoch(partition_dir: Path, epoch: int) -> None:
    """Durably record `epoch`."""
    write_atomic(partition_dir / FILE_NAME, line_checked(str(epoch)))
