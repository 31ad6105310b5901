"""The dedup window of one partition: message ids seen recently, and their offsets.

A message whose `id` was stored within the stream's dedup window is not stored
again; its producer gets the original offset back. Producers of the SDK give
every message an id (`<producer>:<sequence>`) unless the application set one,
so a batch retried after a lost connection never duplicates.

The check is skipped for a batch without ids by one vectorised null count; a
batch with ids costs one dictionary lookup per id, which is what dedup is. The
window is rebuilt from the log when a router takes a partition over.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class DedupPlan:
    """What to do with one batch: which rows to store, and the offsets of the others."""

    keep: pa.Array | None  # boolean mask of rows to store; None: store all
    kept: int  # how many rows are stored
    duplicates: dict[int, int]  # row -> original offset


class DedupWindow:
    """Ids and offsets of messages stored within the last `window_us`."""

    def __init__(self, window_us: int) -> None:
        self.window_us = window_us
        self._seen: OrderedDict[str, tuple[int, int]] = OrderedDict()  # id -> (offset, time)

    def __len__(self) -> int:
        return len(self._seen)

    def _expire(self, now_us: int) -> None:
        horizon = now_us - self.window_us
        while self._seen:
            first = next(iter(self._seen.values()))
            if first[1] >= horizon:
                break
            self._seen.popitem(last=False)

    def plan(self, ids: pa.Array, now_us: int) -> DedupPlan:
        """Classify a batch's rows; duplicates within the batch keep the first copy."""
        if ids.null_count == len(ids):
            return DedupPlan(None, len(ids), {})
        self._expire(now_us)
        duplicates: dict[int, int] = {}
        first_in_batch: dict[str, int] = {}
        for row, message_id in enumerate(ids.to_pylist()):
            if message_id is None:
                continue
            seen = self._seen.get(message_id)
            if seen is not None:
                duplicates[row] = seen[0]
            elif message_id in first_in_batch:
                duplicates[row] = -1 - first_in_batch[message_id]  # resolved after sequencing
            else:
                first_in_batch[message_id] = row
        if not duplicates:
            return DedupPlan(None, len(ids), {})
        keep = pa.array([row not in duplicates for row in range(len(ids))])
        return DedupPlan(keep, len(ids) - len(duplicates), duplicates)

    def record(self, ids: pa.Array, offsets: list[int], time_us: int) -> None:
        """Remember the ids of stored rows (`offsets[i]` is row i's offset)."""
        if ids.null_count == len(ids):
            return
        for message_id, offset in zip(ids.to_pylist(), offsets, strict=True):
            if message_id is not None and message_id not in self._seen:
                self._seen[message_id] = (offset, time_us)


def message_offsets(plan: DedupPlan, rows: int, base: int) -> list[int]:
    """The offset of every row of the original batch, once kept rows start at `base`."""
    out: list[int] = []
    next_offset = base
    for row in range(rows):
        original = plan.duplicates.get(row)
        if original is None:
            out.append(next_offset)
            next_offset += 1
        elif original < 0:
            out.append(out[-1 - original])  # a repeat of an earlier row in this batch
        else:
            out.append(original)
    return out
