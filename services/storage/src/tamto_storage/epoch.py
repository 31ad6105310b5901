"""The owner epoch of a partition, stored durably in ``<partition-dir>/_epoch``.

The file holds the epoch as decimal text and is replaced atomically. Blocking:
call through a thread.
"""

from __future__ import annotations

from pathlib import Path

from tamto_common.durable import write_atomic
from tamto_common.errors import DataCorruption

FILE_NAME = "_epoch"


def load_epoch(partition_dir: Path) -> int:
    """The stored epoch, 0 when none was ever stored."""
    path = partition_dir / FILE_NAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    try:
        return int(text.strip())
    except ValueError:
        raise DataCorruption(f"epoch file {path} holds {text[:40]!r}, not an integer") from None


def store_epoch(partition_dir: Path, epoch: int) -> None:
    """Durably record `epoch`."""
    write_atomic(partition_dir / FILE_NAME, f"{epoch}\n".encode())
