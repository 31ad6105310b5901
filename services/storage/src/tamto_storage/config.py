"""Storage service configuration: where partitions live and how hard we sync."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tamto_common.config import MIB, ServiceConfig, not_negative, one_of, positive, setting
from tamto_common.errors import InvalidArgument
from tamto_storage.sealer import SealOptions
from tamto_storage.segment_reads import DecodedGroups
from tamto_storage.segment_store import SegmentStore
from tamto_storage.wal import WalOptions


def store_uri(value: str) -> str | None:
    """Empty, or a URI the segment store opens (`SegmentStore.open`)."""
    if not value:
        return None
    try:
        SegmentStore.open(value)
    except InvalidArgument as exc:
        return str(exc)
    return None


@dataclass(frozen=True, kw_only=True)
class StorageConfig(ServiceConfig):
    """Settings of a storage node, on top of those every service has."""

    # setting() builds a dataclass field, so the call-in-default rule does not apply.
    data_dir: Path = setting(  # noqa: RUF009
        Path(".tamto/data"), "directory holding every partition's log"
    )
    fsync: str = setting(
        "group",
        "when appends are fsynced: 'group' (one fsync per group commit) or 'interval' "
        "(at most one fsync every --fsync-interval-ms; acks still wait for it)",
        one_of("group", "interval"),
    )
    fsync_interval_ms: int = setting(
        50, "minimum milliseconds between fsyncs in interval mode", positive
    )
    wal_file_bytes: int = setting(64 * MIB, "size at which a WAL file rolls to a new one", positive)
    read_max_bytes: int = setting(
        8 * MIB, "cap on batch bytes per Read response (one larger batch still goes)", positive
    )
    segment_read_cache_mb: int = setting(
        64,
        "MiB of decoded Parquet row groups kept so a read that continues where the last "
        "one stopped does not decode them again (0: none)",
        not_negative,
    )

    segment_bytes: int = setting(
        64 * MIB, "unsealed bytes of a partition that trigger sealing into a segment", positive
    )
    seal_age_ms: int = setting(
        5000,
        "oldest unsealed acknowledged message age (ms) that triggers sealing; with the "
        "default check interval a message is in Parquet within about 6 s of its ack",
        positive,
    )
    seal_check_ms: int = setting(1000, "milliseconds between sealing/retention rounds", positive)
    wal_tail_mb: int = setting(
        1024,
        "MiB of already-sealed WAL files the node keeps, newest first across its partitions, "
        "so a consumer a little behind reads batches as stored instead of decoding Parquet "
        "(0: none)",
        not_negative,
    )
    segment_store: str = setting(
        "",
        "URI of the cluster's segment store that one replica of each partition seals into "
        "(file:///shared/dir or s3://bucket/prefix?endpoint_override=host:port&scheme=http, "
        "credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY); empty: the node's own "
        "data directory, as on one node",
        store_uri,
    )
    store_cache_mb: int = setting(
        1024,
        "MiB of segment store objects a node keeps locally for reads of sealed offsets whose "
        "local copy it reclaimed once the store committed them, least recently used out "
        "first (0: keep every local copy, read nothing from the store)",
        not_negative,
    )
    iceberg_catalog: str = setting(
        "",
        "SQLAlchemy URI of the Iceberg SQL catalog (sqlite:////path/catalog.db) in which "
        "each stream of --segment-store is also a table of the same Parquet files; "
        "empty: no Iceberg tables",
    )
    retention_grace_ms: int = setting(
        300_000,
        "milliseconds an expired segment's file stays on disk so running Spark jobs can finish",
        positive,
    )

    stream_delete_grace_ms: int = setting(
        300_000,
        "milliseconds a deleted stream's data (segments in the store and on the nodes, WAL, "
        "cursors, Iceberg table, ledgers) stays before it is removed; the name cannot be "
        "created again until then",
        not_negative,
    )

    def seal_options(self) -> SealOptions:
        """The sealing settings these config values describe."""
        return SealOptions(
            segment_bytes=self.segment_bytes,
            max_age_s=self.seal_age_ms / 1000,
            check_interval_s=self.seal_check_ms / 1000,
            retention_grace_s=self.retention_grace_ms / 1000,
            wal_tail_bytes=self.wal_tail_mb * MIB,
        )

    def decoded_groups(self) -> DecodedGroups | None:
        """The process's cache of decoded segment row groups, or None when disabled."""
        if not self.segment_read_cache_mb:
            return None
        return DecodedGroups(self.segment_read_cache_mb * MIB)

    def wal_options(self) -> WalOptions:
        """The write-ahead log settings these config values describe."""
        return WalOptions(
            file_bytes=self.wal_file_bytes,
            group_commit=self.fsync == "group",
            fsync_interval_s=self.fsync_interval_ms / 1000,
        )
