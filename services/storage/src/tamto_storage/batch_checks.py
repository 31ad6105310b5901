"""The checks an append's batches pass before anything is stored.

Storage checks again what the gateway checked: its API may be reached by other
services, and a batch stored is a batch every reader decodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tamto_common.errors import InvalidArgument
from tamto_protocol.batch import BatchFormatError, validate_batch
from tamto_storage.frame import MAX_BODY_BYTES
from tamto_storage.model import StoredBatch

MAX_BATCH_COUNT = 0xFFFFFFFF


def check_batches(batches: Sequence[StoredBatch]) -> None:
    """Refuse (InvalidArgument) batches that are not whole, valid and contiguous."""
    if not batches:
        raise InvalidArgument("an append needs at least one batch")
    for i, batch in enumerate(batches):
        if not 1 <= batch.count <= MAX_BATCH_COUNT:
            raise InvalidArgument(f"batch {i}: count must be at least 1, got {batch.count}")
        if not batch.arrow_ipc:
            raise InvalidArgument(f"batch {i}: arrow_ipc must not be empty")
        if len(batch.arrow_ipc) > MAX_BODY_BYTES:
            raise InvalidArgument(f"batch {i}: {len(batch.arrow_ipc)} bytes is too large")
        if batch.base_offset < 0:
            raise InvalidArgument(f"batch {i}: base_offset must not be negative")
        try:
            # Again, as the gateway did: storage's API may be reached by other services.
            validate_batch(batch.arrow_ipc, batch.count, 0)
        except BatchFormatError as exc:
            raise InvalidArgument(f"batch {i}: malformed batch: {exc}") from None
        if i and batch.base_offset != batches[i - 1].end_offset:
            raise InvalidArgument(
                f"batch {i}: base offset {batch.base_offset} does not follow the previous "
                f"batch, which ends at {batches[i - 1].end_offset}"
            )
