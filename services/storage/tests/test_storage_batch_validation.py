"""Storage validates every appended batch in full again: its API may be
reached by services other than a gateway, so it trusts no one's Arrow buffers."""

from __future__ import annotations

import pytest
from storage_testkit import OpenPartition, make_batch

from tamto_common.errors import InvalidArgument
from tamto_storage.model import StoredBatch
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch


@pytest.mark.parametrize("name", sorted(CRAFTED))
async def test_a_lying_batch_is_refused_and_nothing_is_stored(
    load: OpenPartition, name: str
) -> None:
    crafted = CRAFTED[name]
    partition = await load()
    await partition.open(1)
    lying = StoredBatch(0, crafted.count, 1, crafted.arrow_ipc)
    with pytest.raises(InvalidArgument, match=f"batch 0: malformed batch: .*'{crafted.column}'"):
        await partition.append(1, [lying])
    assert partition.offsets().next_offset == 0
    await partition.append(1, [make_batch(0)])  # still serving
    assert partition.offsets().next_offset == 3


async def test_a_batch_whose_count_lies_is_refused(load: OpenPartition) -> None:
    partition = await load()
    await partition.open(1)
    with pytest.raises(InvalidArgument, match=f"declares {ROWS + 1} messages but holds {ROWS}"):
        await partition.append(1, [StoredBatch(0, ROWS + 1, 1, valid_batch())])
    assert partition.offsets().next_offset == 0
