"""Every replica whole at the end of a campaign, read from each storage node itself.

The campaign's final read (a fresh subscription) says what the stream holds: the
id at each (partition, offset). A replicated stream keeps each entry on every
storage node of its ledger; once the faults are over and the nodes heal
(re-replication, catch-up), each node must hold every entry at the same offset.
`whole_replicas` reads every partition from every storage node (not through a
cache: what that node holds) until each matches the final read or the deadline
passes, and returns what was still wrong: an offset a node misses, or one it
holds with another id (two payloads at one offset). `catch_up_log` says what the
routers last logged about catching up the replicas of those partitions, so a failed
campaign shows why they stayed behind.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence

from tamto_cli.chaos.owners import log_event
from tamto_common.channels import ChannelPool
from tamto_protocol.batch import decode_batch
from tamto_router.storage_client import StorageClient

#: Entries asked for per read.
READ_MESSAGES = 1000
#: Reads per partition before its end counts as never reached.
MAX_READS = 100_000
#: Between two checks of replicas that were not whole yet.
RETRY_S = 1.0


async def read_node(storage: StorageClient, stream: str, partition: int) -> dict[int, str | None]:
    """The id at each offset of `partition` that the node holds."""
    found: dict[int, str | None] = {}
    offset = 0
    for _ in range(MAX_READS):
        batches, next_offset = await storage.read(
            stream, partition, offset, READ_MESSAGES, from_cache=False
        )
        if next_offset <= offset:
            return found
        for batch in batches:
            ids = decode_batch(batch.arrow_ipc).column("id").to_pylist()
            for i, message_id in enumerate(ids):
                if batch.base_offset + i >= offset:
                    found[batch.base_offset + i] = message_id
        offset = next_offset
    raise RuntimeError(f"{stream}/{partition}: no end after {MAX_READS} reads")


def differences(
    node: str, held: Mapping[int, str | None], wanted: Mapping[int, str], partition: int
) -> list[str]:
    """What `node` holds of a partition wrongly: missing offsets, other ids at an offset."""
    missing = [o for o in wanted if o not in held]
    other = [o for o, i in wanted.items() if o in held and held[o] != i]
    problems = []
    if missing:
        problems.append(
            f"{node} misses {len(missing)} entries of partition {partition} "
            f"(first at offset {min(missing)})"
        )
    for offset in other[:5]:
        problems.append(
            f"{node} holds {held[offset]!r} at partition {partition} offset {offset}, "
            f"the stream {wanted[offset]!r}"
        )
    return problems


async def whole_replicas(
    nodes: Mapping[str, str],
    stream: str,
    stored: Mapping[tuple[int, int], str],
    partitions: int,
    timeout_s: float,
) -> tuple[int, list[str]]:
    """(replicas compared, what was still wrong after `timeout_s`): each storage node
    (name -> address) against `stored`, (partition, offset) -> id of the final read."""
    wanted: dict[int, dict[int, str]] = {p: {} for p in range(partitions)}
    for (partition, offset), message_id in stored.items():
        wanted[partition][offset] = message_id
    channels = ChannelPool()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            problems: list[str] = []
            for node, address in sorted(nodes.items()):
                storage = StorageClient(channels.get(address), timeout_s=10.0)
                for partition in range(partitions):
                    try:
                        held = await read_node(storage, stream, partition)
                    except Exception as exc:
                        problems.append(f"{node} could not be read: {exc!r}")
                        break
                    problems += differences(node, held, wanted[partition], partition)
            if not problems or time.monotonic() > deadline:
                return len(nodes) * partitions, problems
            await asyncio.sleep(RETRY_S)
    finally:
        await channels.close()


_PARTITION = re.compile(r"partition (\d+)")
#: Router log fields shown beside an event.
_SHOWN = ("replica", "spare", "error", "answer", "wanted_next_offset", "next_offset")


def catch_up_log(
    router_logs: Mapping[str, Sequence[str]], problems: Sequence[str], stream: str, last: int = 5
) -> list[str]:
    """The last `last` events each router logged about the replicas of each partition
    named in `problems` (`differences`), oldest first."""
    partitions = {int(m.group(1)) for p in problems if (m := _PARTITION.search(p))}
    found: list[str] = []
    for router, lines in sorted(router_logs.items()):
        events = [e for e in map(log_event, lines) if e is not None]
        for partition in sorted(partitions):
            about = [
                e
                for e in events
                if e.get("stream") == stream
                and e.get("partition") == partition
                and "replica" in str(e.get("event", ""))
            ]
            for e in about[-last:]:
                shown = ", ".join(f"{k}={e[k]}" for k in _SHOWN if k in e)
                found.append(
                    f"{router}, partition {partition}, {e.get('timestamp', '?')}: "
                    f"{e['event']} ({shown})"
                )
    return found
