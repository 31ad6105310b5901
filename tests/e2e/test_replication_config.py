"""A stream's replication factor and ack quorum on a three-node cluster:
the defaults follow the live storage nodes, and bad values are refused naming the
field."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

import tamto_sdk
from tamto_sdk import StreamConfig
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra

pytestmark = pytest.mark.e2e


async def test_replication_defaults_and_bounds_on_three_storage_nodes(
    tamto_infra: Infra, tmp_path: Path
) -> None:
    cluster = TestCluster(tmp_path / "cluster", tamto_infra, nodes=3)
    with cluster.running():
        async with tamto_sdk.connect(cluster.url, api_key=cluster.credential) as client:
            name = f"replicated-{secrets.token_hex(3)}"
            created = await client.streams.ensure(name)
            assert created.stream.config.replication_factor == 3
            assert created.stream.config.ack_quorum == 2
            described = await client.streams.describe(name)
            assert (described.config.replication_factor, described.config.ack_quorum) == (3, 2)

            two = await client.streams.ensure(
                f"two-{secrets.token_hex(3)}", config=StreamConfig(replication_factor=2)
            )
            assert (two.stream.config.replication_factor, two.stream.config.ack_quorum) == (2, 2)

            for config, message in [
                (
                    StreamConfig(replication_factor=4),
                    "replication_factor 4 is more than the 3 live storage node(s)",
                ),
                (
                    StreamConfig(replication_factor=3, ack_quorum=4),
                    "ack_quorum 4 is more than replication_factor 3",
                ),
            ]:
                bad = f"bad-{secrets.token_hex(3)}"
                with pytest.raises(tamto_sdk.errors.InvalidArgument) as info:
                    await client.streams.ensure(bad, config=config)
                assert message in info.value.message
                with pytest.raises(tamto_sdk.errors.NotFound):
                    await client.streams.describe(bad)
