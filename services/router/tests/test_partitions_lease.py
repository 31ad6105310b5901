"""A router whose ownership lease may have expired in etcd accepts nothing.

Once `KeptLease.valid` is false another router may be granted the partition, so
this one refuses appends and reads with UNAVAILABLE and gives its claims up,
before anyone else can take over, as the fencing rules say.
"""

from __future__ import annotations

from typing import Any

import pytest

from tamto_common.errors import Unavailable
from tamto_router.ownership import Claim
from tamto_router.partitions import Partitions


def no_storage(stream: str, partition: int, ledgers: Any) -> Any:
    raise AssertionError("an invalid lease must not reach storage")


async def test_no_partition_is_served_while_the_lease_may_have_expired() -> None:
    valid = True
    partitions = Partitions(
        etcd=None,
        lease=lambda: None,
        instance="router-1",
        storage_for=no_storage,
        claim_timeout_s=1.0,
        lease_valid=lambda: valid,
    )
    partitions._claims[("s", 0)] = Claim("s", 0, 3)  # held from before etcd went away
    valid = False
    with pytest.raises(Unavailable, match="lease"):
        await partitions.get("s", 0)
    assert not partitions._claims, "the claims are given up, to be made again with a new epoch"
