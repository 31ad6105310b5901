"""A stored batch (`tamto_router.model.Batch`) to and from its wire form
(`StoredBatch`): both of the router's adapters carry stored batches, the client one
in reads and the storage one in reads and repairs, so the conversion lives once here."""

from __future__ import annotations

from tamto_protocol.v1 import messages_pb2
from tamto_router.model import Batch


def batch_to_proto(b: Batch) -> messages_pb2.StoredBatch:
    return messages_pb2.StoredBatch(
        base_offset=b.base_offset,
        count=b.count,
        publish_time_us=b.publish_time_us,
        arrow_ipc=b.arrow_ipc,
    )


def batch_from_proto(b: messages_pb2.StoredBatch) -> Batch:
    return Batch(b.base_offset, b.count, b.publish_time_us, b.arrow_ipc)
