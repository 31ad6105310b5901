"""Prometheus metrics of the storage service (registered once, on import)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

APPENDED_MESSAGES = Counter(
    "tamto_storage_appended_messages",
    "Messages appended durably (acked) per stream",
    ["stream"],
)
APPENDED_BYTES = Counter(
    "tamto_storage_appended_bytes",
    "Arrow IPC bytes appended durably (acked) per stream",
    ["stream"],
)
FSYNC_SECONDS = Histogram(
    "tamto_storage_fsync_seconds",
    "Latency of one WAL fsync",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
GROUP_COMMIT_BATCHES = Histogram(
    "tamto_storage_group_commit_batches",
    "Batches made durable by one group commit (one fsync)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
QUARANTINED_BATCHES = Gauge(
    "tamto_storage_quarantined_batches",
    "Stored batches that could not be sealed and were kept aside under a partition's "
    "_quarantine/ directory (tamto_storage.quarantine), per stream, on this node",
    ["stream"],
)
READ_BATCHES = Counter(
    "tamto_storage_read_batches",
    "Batches served by reads by offset, per source: wal (not sealed yet), tail (sealed, "
    "from the read tail's WAL files) or segments (decoded from Parquet)",
    ["source"],
)
INTEREST_FREED_BYTES = Counter(
    "tamto_storage_interest_freed_bytes",
    "Segment bytes interest retention took out of the manifest (dropped, or replaced by a "
    "smaller carried-forward segment), per stream",
    ["stream"],
)
CARRIED_MESSAGES = Counter(
    "tamto_storage_carried_messages",
    "Messages interest retention copied into carried-forward segments, per stream",
    ["stream"],
)
UNSEALED_BYTES = Gauge(
    "tamto_storage_unsealed_bytes",
    "Arrow IPC bytes acked but not sealed into Parquet yet, over the open partitions: "
    "what the sealer still has to write (at most about a segment per partition, or "
    "what arrived within the seal age)",
)
DAMAGED_FILES = Gauge(
    "tamto_storage_damaged_files",
    "Files of an open partition found damaged (segments failing their digest or page "
    "checksums, a WAL frame failing its CRC): their offsets are answered with DATA_LOSS "
    "until repaired (from a healthy replica when the stream is replicated, else by "
    "`tamto storage repair`); per stream and partition",
    ["stream", "partition"],
)
REPAIRED_RANGES = Counter(
    "tamto_storage_repaired_ranges",
    "Damaged ranges of this node's copy of a replicated partition replaced by a healthy "
    "replica's entries (tamto_storage.replica_repair), per stream and kind (segment or wal)",
    ["stream", "kind"],
)
STORE_SEGMENTS = Counter(
    "tamto_storage_store_segments_published",
    "Segments this node committed to the cluster's segment store (--segment-store)",
)
STORE_ERRORS = Counter(
    "tamto_storage_store_errors",
    "Failed attempts to reach the segment store (the WAL is kept and sealing retries)",
)
