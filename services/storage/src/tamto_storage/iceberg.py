"""Each stream of the segment store as an Iceberg table, zero copy: the same Parquet files.

A committed segment is appended to the table ``tamto.<stream>`` of a PyIceberg
SQL catalog (SQLite by default; any SQLAlchemy URI, `--iceberg-catalog`) as the
file it is in the store: no byte is copied. The table's schema is the segment
schema (`tamto_protocol.segment`) plus ``partition`` (int), partitioned by it
(identity): the files do not hold that column, so readers take it from each
file's partition value, as Iceberg's column projection rules say. The files
have no Iceberg field ids; the table's default name mapping resolves their
columns by name. Table metadata lives under ``<store>/_iceberg/``.

Exactly once: the table property ``tamto.end.<p>`` records where partition p's
appended segments end, and is set in the same commit as each append, so a
segment is appended only if it starts at or past it: a retry after a crash, or
a publisher taking over, never appends a file twice. Publishers of different
partitions commit to one table: a commit that lost the race (the catalog's
compare-and-swap of the metadata location) is tried again on the new metadata.

Every call here blocks: call through a thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record

from tamto_protocol.segment import SEGMENT_SCHEMA, parse_segment_name, segment_file_name
from tamto_storage.segment_store import SegmentStore, StoredSegment

log = structlog.get_logger(__name__)

NAMESPACE = "tamto"
END_PROPERTY = "tamto.end."
NAME_MAPPING = "schema.name-mapping.default"
#: Commits lost to another publisher's, tried again before the next round does.
COMMIT_TRIES = 5
#: The table's Arrow schema: the segment's, then the partition (from the file's path).
TABLE_SCHEMA = SEGMENT_SCHEMA.remove_metadata().append(pa.field("partition", pa.int32()))


class IcebergTables:
    """The Iceberg tables of a segment store's streams, in one SQL catalog."""

    def __init__(self, catalog_uri: str, store: SegmentStore) -> None:
        options = store.s3_options()
        properties = {"uri": catalog_uri, "warehouse": store.location(f"{store.root}/_iceberg")}
        if options:
            scheme = options.get("scheme", "https")
            properties["s3.endpoint"] = f"{scheme}://{options['endpoint_override']}"
            properties["s3.region"] = options.get("region", "us-east-1")
        self._store = store
        self._properties = properties
        self._catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        """The catalog, opened on first use: several nodes starting at once race to
        create its tables, and the loser's error is the caller's to retry (next round)."""
        if self._catalog is None:
            catalog = SqlCatalog(NAMESPACE, **self._properties)
            catalog.create_namespace_if_not_exists(NAMESPACE)
            self._catalog = catalog
        return self._catalog

    def table(self, stream: str) -> Table:
        """The stream's table, created on first use."""
        identifier = (NAMESPACE, stream)
        try:
            table = self.catalog.load_table(identifier)
        except NoSuchTableError:
            schema = Catalog._convert_schema_if_needed(TABLE_SCHEMA)
            source = schema.find_field("partition").field_id
            spec = PartitionSpec(PartitionField(source, 1000, IdentityTransform(), "partition"))
            table = self.catalog.create_table_if_not_exists(identifier, schema, partition_spec=spec)
        # Set in a commit after the creation's: a node that died between the two left a
        # table without it, which whoever loads the table next completes.
        if NAME_MAPPING not in table.properties:
            with table.transaction() as tx:
                tx.set_properties({NAME_MAPPING: table.schema().name_mapping.model_dump_json()})
            table = self.catalog.load_table(identifier)
        return table

    def end(self, stream: str, partition: int) -> int | None:
        """Where the partition's appended segments end in the table, if any were."""
        value = self.table(stream).properties.get(f"{END_PROPERTY}{partition}")
        return int(value) if value is not None else None

    def append(self, stream: str, partition: int, committed: Sequence[StoredSegment]) -> int:
        """Append the store's `committed` segments of a partition that the table lacks;
        returns how many were appended."""
        for _ in range(COMMIT_TRIES):
            table = self.table(stream)
            end = int(table.properties.get(f"{END_PROPERTY}{partition}", -1))
            missing = [s for s in committed if s.first_offset >= end]
            if not missing:
                return 0
            files = [self._data_file(table, stream, partition, s) for s in missing]
            try:
                with table.transaction() as tx:
                    with tx.update_snapshot().fast_append() as append:
                        for data_file in files:
                            append.append_data_file(data_file)
                    tx.set_properties({f"{END_PROPERTY}{partition}": str(missing[-1].end_offset)})
            except CommitFailedException:
                continue  # another partition's publisher committed first: read again
            log.info(
                "segments added to the Iceberg table",
                stream=stream,
                partition=partition,
                files=len(files),
                end=missing[-1].end_offset,
            )
            return len(files)
        raise CommitFailedException(f"{stream}/{partition}: {COMMIT_TRIES} commits lost")

    def remove(self, stream: str, partition: int, below: int) -> int:
        """Delete from the table, as whole files, the partition's segments that end at or
        below `below` (retention); returns how many were removed."""
        for _ in range(COMMIT_TRIES):
            table = self.table(stream)
            doomed = [
                task.file
                for task in table.scan().plan_files()
                if task.file.partition[0] == partition and _ends_by(task.file.file_path, below)
            ]
            if not doomed:
                return 0
            try:
                with table.transaction() as tx:
                    with tx.update_snapshot().overwrite() as overwrite:
                        for data_file in doomed:
                            overwrite.delete_data_file(data_file)
            except CommitFailedException:
                continue  # another partition's publisher committed first: read again
            log.info("segments removed from the Iceberg table", stream=stream, files=len(doomed))
            return len(doomed)
        raise CommitFailedException(f"{stream}/{partition}: {COMMIT_TRIES} commits lost")

    def drop(self, stream: str) -> bool:
        """Drop the stream's table from the catalog and remove its metadata files from
        the store (the data files are the store's segments, removed with them);
        False when there was no table. A drop interrupted after the catalog's part
        leaves metadata files, which the next drop of the name removes."""
        identifier = (NAMESPACE, stream)
        # Where the catalog puts a table it creates (PyIceberg: <warehouse>/<namespace>/<table>).
        default = f"{self._properties['warehouse']}/{NAMESPACE}/{stream}"
        try:
            location = self.catalog.load_table(identifier).metadata.location
        except NoSuchTableError:
            self._store.delete_location(default)
            return False
        self.catalog.drop_table(identifier)
        for where in {location, default}:
            self._store.delete_location(where)
        log.info("Iceberg table dropped", stream=stream, location=location)
        return True

    def _data_file(
        self, table: Table, stream: str, partition: int, segment: StoredSegment
    ) -> DataFile:
        """The Iceberg data file of a committed segment: its statistics from its footer."""
        name = segment_file_name(segment.first_offset, segment.last_offset)
        path = f"{self._store.partition_path(stream, partition)}/{name}"
        with self._store.filesystem.open_input_file(path) as f:
            footer = pq.read_metadata(f)
        schema = table.metadata.schema()
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer,
            stats_columns=compute_statistics_plan(schema, table.metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema),
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self._store.location(path),
            file_format=FileFormat.PARQUET,
            partition=Record(partition),
            file_size_in_bytes=segment.size,
            sort_order_id=None,
            spec_id=table.metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )


def _ends_by(file_path: str, below: int) -> bool:
    """Whether the segment at `file_path` ends at or before offset `below`."""
    parsed = parse_segment_name(file_path.rsplit("/", 1)[-1])
    return parsed is not None and parsed[1] < below
