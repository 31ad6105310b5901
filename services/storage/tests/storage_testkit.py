"""Helpers shared by the storage tests (a uniquely named module, imported directly)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from tamto_protocol.batch import BatchColumns, decode_batch, encode_batch
from tamto_storage.frame import HEADER_SIZE
from tamto_storage.model import StoredBatch
from tamto_storage.partition import Partition
from tamto_storage.wal import WalOptions

DEFAULT_OPTIONS = WalOptions()

#: The `load` fixture's type: `await load()` or `await load(options)` opens the test partition.
OpenPartition = Callable[..., Awaitable[Partition]]
PUBLISH_TIME_US = 1_700_000_000_000_000


def payload_for(offset: int) -> bytes:
    """The payload the tests store at `offset`, so reads can be checked exactly."""
    return f"message-{offset}".encode()


def make_batch(base_offset: int, count: int = 3, pad: int = 0) -> StoredBatch:
    """A batch of `count` messages at `base_offset` with known payloads (`pad` grows them)."""
    offsets = range(base_offset, base_offset + count)
    arrow = encode_batch(
        BatchColumns(
            payloads=[payload_for(o) + b"x" * pad for o in offsets],
            keys=[None] * count,
            headers=[None] * count,
            ids=[None] * count,
            event_times_us=[None] * count,
            producer="test",
        )
    )
    return StoredBatch(base_offset, count, PUBLISH_TIME_US + base_offset, arrow)


def payloads(batch: StoredBatch) -> list[bytes]:
    """The payload column of a stored batch, with any padding removed."""
    values = decode_batch(batch.arrow_ipc).column("payload").to_pylist()
    return [v.rstrip(b"x") for v in values]


def check_batch(batch: StoredBatch) -> None:
    """Assert the batch holds exactly the payloads of its offsets."""
    expected = [payload_for(o) for o in range(batch.base_offset, batch.end_offset)]
    assert payloads(batch) == expected


def offsets_of(batches: Sequence[StoredBatch]) -> list[int]:
    return [b.base_offset for b in batches]


def frame_position(batches: Sequence[StoredBatch], index: int) -> int:
    """Byte position of frame `index` in a WAL file holding `batches` from its start."""
    return sum(HEADER_SIZE + len(b.arrow_ipc) for b in batches[:index])


async def append_batches(partition: Partition, epoch: int, base_offsets: range) -> None:
    """Append `make_batch(base)` for each base offset, one append each, as `epoch`."""
    for base in base_offsets:
        await partition.append(epoch, [make_batch(base)])


def wal_files(partition_dir: Path) -> list[Path]:
    return sorted((partition_dir / "_wal").glob("*.log"))


def flip_byte(path: Path, position: int) -> None:
    """Corrupt one byte of a file in place."""
    with path.open("r+b") as f:
        f.seek(position)
        value = f.read(1)[0]
        f.seek(position)
        f.write(bytes([value ^ 0xFF]))


async def read_all(partition: Partition, from_offset: int) -> list[StoredBatch]:
    """Every batch from `from_offset` to the partition's end, read by offset."""
    out: list[StoredBatch] = []
    offset = from_offset
    while offset < partition.offsets().next_offset:
        result = await partition.read(offset, 0, 1 << 20)
        out.extend(result.batches)
        offset = result.next_offset
    return out
