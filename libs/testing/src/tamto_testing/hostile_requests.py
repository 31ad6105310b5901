"""Requests at and over the documented limits of their lists, and batches whose
schema is huge: the worst a client may send (docs/validation.md).

The e2e tests and the fuzzing send these through a real gateway: one over a
limit must be refused with INVALID_ARGUMENT naming the field and the limit, one
at it must leave another client's publishes fast.
"""

from __future__ import annotations

import pyarrow as pa

from tamto_protocol.batch import BATCH_SCHEMA, encode_record_batch
from tamto_protocol.v1 import messages_pb2


def disjoint_ranges(n: int, start: int = 0) -> list[messages_pb2.OffsetRange]:
    """n one-offset ranges with a gap between each two, from `start` on: the ack
    that cost a router O(n^2) (each its own range among all the others)."""
    return [messages_pb2.OffsetRange(first=start + 2 * i, last=start + 2 * i) for i in range(n)]


def ack_of(partition: int, ranges: list[messages_pb2.OffsetRange]) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(
        ack=messages_pb2.PartitionAcks(partition=partition, ranges=ranges)
    )


def nack_of(partition: int, ranges: list[messages_pb2.OffsetRange]) -> messages_pb2.ConsumeRequest:
    return messages_pb2.ConsumeRequest(
        nack=messages_pb2.PartitionNacks(partition=partition, ranges=ranges, delay_ms=60_000)
    )


def huge_schema_batch(fields: int = 20_000) -> bytes:
    """A one-row batch whose `key` column is a struct of `fields` long-named fields
    instead of binary: its type, written out, is about 60 characters a field (a
    schema-mismatch error once quoted all of it, 955,143 characters)."""
    struct_type = pa.struct([(f"field_with_a_long_name_{i:06d}", pa.int8()) for i in range(fields)])
    schema = BATCH_SCHEMA.set(0, pa.field("key", struct_type))
    arrays = [pa.nulls(1, type=field.type) for field in schema]
    arrays[1] = pa.array([b"payload"], type=pa.binary())
    return encode_record_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
