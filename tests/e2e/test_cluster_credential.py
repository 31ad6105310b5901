"""A node joins only with the cluster's credential (Deliver 6: joining).

The test runs its own etcd and NATS: the credential it records is for the
whole etcd, and the session's etcd is shared with clusters that have none. A
storage node started with the cluster secret records its hash and serves; a
router started without the secret, and one with another cluster's, exit with
code 3 and one line saying why, and never register.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tamto_common.cluster_credential import CREDENTIAL_KEY, new_cluster_secret
from tamto_common.config import parse_endpoints
from tamto_common.membership import connect_etcd, list_members
from tamto_common.service import REFUSED_EXIT_CODE
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra, running_infra

pytestmark = pytest.mark.e2e

#: Generous: a refused process ends the wait at once when it exits; a loaded machine
#: (load 20+) took over 30 s to import a service.
START_S = 180.0


async def registered(etcd_endpoint: str) -> tuple[set[str], bool]:
    """(the instance ids registered in etcd, whether a credential is recorded)."""
    etcd = await connect_etcd(parse_endpoints(etcd_endpoint))
    try:
        members = {m.instance_id for m in await list_members(etcd)}
        return members, await etcd.get(CREDENTIAL_KEY.encode()) is not None
    finally:
        await etcd.close()


def refused_start(infra: Infra, workdir: Path, env: dict[str, str]) -> tuple[str, int | None]:
    """Start a router of another (test) cluster on `infra` with `env`: its one refusal
    line and exit code."""
    intruder = TestCluster(workdir, infra)
    try:
        with pytest.raises(AssertionError, match="exited early"):
            intruder.start("router", START_S, extra_env=env)
        log = (workdir / "logs" / "router.log").read_text(errors="replace")
        lines = [x for x in log.splitlines() if x.startswith("tamto-router:")]
        return "\n".join(lines), intruder.stop("router")
    finally:
        intruder.stop_all()


def test_a_node_without_the_cluster_credential_is_refused(tmp_path: Path) -> None:
    secret = new_cluster_secret()
    with running_infra(tmp_path / "infra") as infra:
        cluster = TestCluster(tmp_path / "cluster", infra)
        try:
            cluster.start("storage", START_S, extra_env={"TAMTO_CLUSTER_SECRET": secret})
            members, recorded = asyncio.run(registered(infra.etcd_endpoint))
            assert recorded, "the first node with a secret records the credential"
            assert cluster.instance_id("storage") in members

            line, code = refused_start(infra, tmp_path / "none", {"TAMTO_CLUSTER_SECRET": ""})
            assert line == (
                "tamto-router: refused: cluster credential: this cluster requires one and "
                "this node has none (set --cluster-secret / TAMTO_CLUSTER_SECRET; etcd holds "
                f"its hash at {CREDENTIAL_KEY})"
            )
            assert code == REFUSED_EXIT_CODE

            other = {"TAMTO_CLUSTER_SECRET": new_cluster_secret()}
            line, code = refused_start(infra, tmp_path / "wrong", other)
            assert "does not match the cluster's" in line
            assert code == REFUSED_EXIT_CODE

            members, _ = asyncio.run(registered(infra.etcd_endpoint))
            assert {m.split("-")[0] for m in members} == {"storage"}, "no router registered"
            assert cluster.processes["storage"].alive()
        finally:
            cluster.stop_all()
