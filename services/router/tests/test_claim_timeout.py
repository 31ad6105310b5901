"""How long a request waits for a partition's previous owner follows the lease TTL
(`--lease-ttl-s`): three TTLs unless set, and never one TTL or less."""

from __future__ import annotations

import pytest

from tamto_common.config import load_config
from tamto_common.errors import ConfigError
from tamto_router.config import RouterConfig


def test_the_claim_timeout_is_three_lease_ttls_unless_set() -> None:
    assert load_config(RouterConfig, "router", environ={}).claim_timeout == 15.0
    config = load_config(RouterConfig, "router", ["--lease-ttl-s", "3"], environ={})
    assert config.claim_timeout == 9.0
    config = load_config(
        RouterConfig,
        "router",
        environ={"TAMTO_LEASE_TTL_S": "3", "TAMTO_ROUTER_CLAIM_TIMEOUT_S": "4"},
    )
    assert config.claim_timeout == 4.0


def test_a_claim_timeout_within_the_lease_ttl_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be more than the lease TTL \\(10 s\\), got 10"):
        load_config(
            RouterConfig, "router", ["--lease-ttl-s", "10", "--claim-timeout-s", "10"], environ={}
        )
