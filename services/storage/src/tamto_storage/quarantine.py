"""Quarantine: a stored batch that cannot be sealed is kept aside, and sealing goes on past it.

Gateway and storage validate every batch in full before acknowledging it
(`tamto_protocol.batch.validate_batch`, docs/validation.md), so a bad batch in
the WAL means something got past them: a bug, an older version's data, a
write that bypassed the API. Before, one such batch failed every sealing round
of its node (``ArrowInvalid ... 18446744073709551609``), so no stream
on the node reached Parquet again and WAL retention stopped.

Now the sealer checks each batch of a run before writing it (the same full
check; about 30 µs per 1,000 messages). A batch that fails is:

- kept: its Arrow IPC bytes go to ``_quarantine/<first>-<last>.arrow`` in the
  partition's directory (hidden from Spark by the leading ``_``), written
  atomically, with the reason beside it in ``<first>-<last>.reason``;
- counted: ``tamto_storage_quarantined_batches{stream}`` (a gauge of the files
  on the node, set at load too) and shown by ``tamto status``;
- logged: ``batch quarantined`` with stream, partition, offsets and reason;
- sealed past: its offsets become an empty segment (a segment's range may
  store fewer rows than it covers, as carried-forward ones do), so the
  partition's sealed log stays contiguous and readers skip the offsets.

Every function here blocks: call through a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog

from tamto_common.durable import make_dirs, write_atomic
from tamto_protocol.batch import BatchFormatError, validate_batch
from tamto_protocol.segment import (
    SEGMENT_SCHEMA,
    segment_file_name,
)
from tamto_storage import metrics
from tamto_storage.model import PartitionId, StoredBatch
from tamto_storage.segments import Segment, segment_entry, segment_metadata, write_digested

log = structlog.get_logger(__name__)

#: The partition subdirectory quarantined batches are kept in.
QUARANTINE_DIR = "_quarantine"


def problem(batch: StoredBatch) -> str | None:
    """Why `batch` cannot be sealed, or None when it can."""
    try:
        validate_batch(batch.arrow_ipc, batch.count, 0)
    except BatchFormatError as exc:
        return str(exc)
    return None


def runs(batches: Sequence[StoredBatch]) -> list[tuple[list[StoredBatch], str | None]]:
    """`batches` split into consecutive runs to seal: good runs (reason None) and
    single bad batches with the reason they cannot be sealed."""
    out: list[tuple[list[StoredBatch], str | None]] = []
    for batch in batches:
        reason = problem(batch)
        if reason is None and out and out[-1][1] is None:
            out[-1][0].append(batch)
        else:
            out.append(([batch], reason))
    return out


def quarantine(pid: PartitionId, directory: Path, batch: StoredBatch, reason: str) -> Segment:
    """Keep `batch` under ``_quarantine/``, count and log it, and write the empty
    segment that seals past its offsets (see the module docstring)."""
    first, last = batch.base_offset, batch.end_offset - 1
    kept = directory / QUARANTINE_DIR
    make_dirs(kept)
    write_atomic(kept / f"{first}-{last}.arrow", bytes(batch.arrow_ipc))
    write_atomic(kept / f"{first}-{last}.reason", reason.encode() + b"\n")
    metrics.QUARANTINED_BATCHES.labels(pid.stream).inc()
    log.error(
        "batch quarantined",
        stream=pid.stream,
        partition=pid.partition,
        first_offset=first,
        last_offset=last,
        reason=reason,
        kept=str(kept / f"{first}-{last}.arrow"),
    )
    metadata = segment_metadata(first, last, batch.publish_time_us, batch.publish_time_us)
    empty = SEGMENT_SCHEMA.with_metadata(metadata).empty_table()
    path = directory / segment_file_name(first, last)
    digest = write_digested(path, empty)
    entry = segment_entry(pid.partition, metadata, path.stat().st_size, 0, digest=digest)
    return Segment(entry, path)


def quarantined(directory: Path) -> list[str]:
    """The quarantined batches of a partition directory, as ``<first>-<last>``."""
    kept = directory / QUARANTINE_DIR
    if not kept.is_dir():
        return []
    return sorted(p.stem for p in kept.glob("*.arrow"))
