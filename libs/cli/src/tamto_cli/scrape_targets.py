"""`tamto scrape-targets`: the members registered in etcd as a Prometheus target file.

Each service serves its metrics on `--metrics-port` (0, any free port, unless told) and
registers that address in etcd with its membership; Prometheus has no etcd discovery,
so this writes the members as a `file_sd` target list, each labelled with its service
(`job`) and instance id (`instance`), which infra/prometheus/prometheus.yml reads.
With `--every` it rewrites the file until stopped, so a process that came back on
another port is scraped again within that long.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from pathlib import Path

from tamto_common.config import parse_endpoints
from tamto_common.durable import write_atomic
from tamto_common.membership import Member, connect_etcd, list_members


def target_groups(members: Iterable[Member]) -> list[dict[str, object]]:
    """Prometheus `file_sd` target groups: one per member, by service and instance."""
    return [
        {"targets": [m.metrics_address], "labels": {"job": m.service, "instance": m.instance_id}}
        for m in sorted(members, key=lambda m: (m.service, m.instance_id))
    ]


async def write_targets(etcd_endpoint: str, path: Path) -> int:
    """Write the members registered now to `path` (atomically); how many there were."""
    client = await connect_etcd(parse_endpoints(etcd_endpoint), timeout_s=3)
    try:
        members = await list_members(client)
    finally:
        await client.close()
    write_atomic(path, (json.dumps(target_groups(members), indent=2) + "\n").encode())
    return len(members)


async def keep_writing(etcd_endpoint: str, path: Path, every_s: float) -> None:
    """`write_targets` every `every_s` seconds, until cancelled."""
    while True:
        await write_targets(etcd_endpoint, path)
        await asyncio.sleep(every_s)
