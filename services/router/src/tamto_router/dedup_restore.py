"""A partition's dedup window when its router opens it: kept, or rebuilt from the log.

A window is the router's memory of the ids stored recently (`tamto_router.dedup`).
When the router that recorded it reopens the partition with no other owner in
between (storage restarted, the lease was granted again) it keeps it, cut back to
the log's end; otherwise it is rebuilt from what the log stored within the window,
reading only the id column of those batches. Damaged stored data does not stop the
claim: its ids are lost to the window, the rest of the log is not.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import structlog

from tamto_common.errors import DataLoss, damaged_offsets
from tamto_protocol.batch import decode_column
from tamto_router.dedup import DedupWindow
from tamto_router.model import Batch, LogBounds
from tamto_router.storage_client import StorageClient

log = structlog.get_logger(__name__)


async def restore_window(
    stream: str,
    partition: int,
    storage: StorageClient,
    bounds: LogBounds,
    window_us: int,
    kept: DedupWindow | None = None,
) -> DedupWindow:
    """`kept` (this router's own window of the previous epoch, when nobody else owned
    the partition since) cut back to the log's end, else a window of `window_us`
    rebuilt from what the log stored within it."""
    if kept is not None:
        kept.window_us = window_us
        dropped = kept.truncate(bounds.next_offset)
        if dropped:
            log.info(
                "dedup window kept without ids never stored",
                stream=stream,
                partition=partition,
                dropped=dropped,
                next_offset=bounds.next_offset,
            )
        return kept
    window = DedupWindow(window_us)
    since = time.time_ns() // 1000 - window.window_us
    try:
        offset = await storage.offset_for_time(stream, partition, since)
    except DataLoss as exc:  # a damaged segment: rebuild from past its range
        offset = _past_damage(stream, partition, exc, bounds.next_offset)
    while offset < bounds.next_offset:
        try:
            batches, _ = await storage.read(stream, partition, offset, 10_000)
        except DataLoss as exc:
            # Damaged stored data must not stop the claim (publishing would fail
            # for as long as it is there): its ids are lost to the window, the
            # rest of the log is not. Consumers reading the range get DATA_LOSS.
            offset = _past_damage(stream, partition, exc, bounds.next_offset)
            continue
        if not batches:
            break
        _record_stored(window, batches)
        offset = batches[-1].end
    return window


def _record_stored(window: DedupWindow, batches: list[Batch]) -> None:
    """Remember the ids of stored `batches` (ascending) in `window`: each stretch of
    contiguous batches at once (`DedupWindow.record_log`), reading only their id column."""
    start = 0
    for i in range(1, len(batches) + 1):
        if i < len(batches) and batches[i].base_offset == batches[i - 1].end:
            continue
        stretch = batches[start:i]
        ids = pa.concat_arrays([decode_column(b.arrow_ipc, "id") for b in stretch])
        times = np.repeat(
            np.array([b.publish_time_us for b in stretch], np.int64),
            [b.count for b in stretch],
        )
        window.record_log(ids, stretch[0].base_offset, times)
        start = i


def _past_damage(stream: str, partition: int, exc: DataLoss, end: int) -> int:
    """Where the dedup rebuild goes on after `exc`: past the damaged range it names, or
    at the log's end when its end is not known (WAL damage ends the readable log)."""
    damaged = damaged_offsets(str(exc))
    resume = end if damaged is None or damaged[1] is None else damaged[1] + 1
    log.error(
        "dedup window rebuilt without a damaged range",
        stream=stream,
        partition=partition,
        error=str(exc),
        resume_at=resume,
    )
    return resume
