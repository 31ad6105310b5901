"""The checks a client's publish passes before it is appended: one implementation for
every service a client publishes through (the gateway, and the owner router on the
direct path, docs/cluster.md section 5), so both refuse the same batch the same way."""

from __future__ import annotations

from tamto_common.errors import FailedPrecondition, InvalidArgument
from tamto_common.streams import StreamDef
from tamto_protocol.batch import BatchFormatError, validate_batch


def check_publish(
    stream: StreamDef, partition: int, arrow_ipc: bytes, count: int, max_message_bytes: int
) -> None:
    """Refuse a publish to an ephemeral stream (FAILED_PRECONDITION), to a partition the
    stream does not have, or of a malformed batch (INVALID_ARGUMENT, saying what is wrong)."""
    if stream.ephemeral:
        raise FailedPrecondition(
            f"stream {stream.name!r} is ephemeral: publish with PublishEphemeral"
        )
    if partition >= stream.partitions:
        raise InvalidArgument(
            f"stream {stream.name!r} has partitions 0-{stream.partitions - 1}, not {partition}"
        )
    try:
        validate_batch(arrow_ipc, count, max_message_bytes)
    except BatchFormatError as exc:
        raise InvalidArgument(f"malformed batch: {exc}") from None
