"""The replicas' check of a network campaign: what a replica holds wrongly, and what
the routers last logged about catching up the partitions that stayed wrong."""

from __future__ import annotations

import json

from tamto_cli.chaos.replicas import catch_up_log, differences


def event(name: str, partition: int, stream: str = "chaos", **fields: object) -> str:
    return json.dumps({"event": name, "stream": stream, "partition": partition, **fields})


def test_missing_offsets_and_other_ids_are_named() -> None:
    problems = differences("storage-2", {0: "a", 1: "x"}, {0: "a", 1: "b", 2: "c"}, 3)
    assert problems == [
        "storage-2 misses 1 entries of partition 3 (first at offset 2)",
        "storage-2 holds 'x' at partition 3 offset 1, the stream 'b'",
    ]


def test_the_last_replica_events_of_the_wrong_partitions_are_quoted() -> None:
    lines = [
        "not json",
        event("replica not caught up yet", 0, replica="storage-2", error="old"),
        event("replica not caught up yet", 0, replica="storage-2", error="deadline"),
        event("replica not caught up yet", 1, replica="storage-2", error="other partition"),
        event("replica not caught up yet", 0, stream="other", error="other stream"),
        event("append failed", 0, error="not about a replica"),
    ]
    problems = ["storage-2 misses 70 entries of partition 0 (first at offset 1820)"]
    found = catch_up_log({"router-2": lines, "router": []}, problems, "chaos", last=1)
    assert found == [
        "router-2, partition 0, ?: replica not caught up yet (replica=storage-2, error=deadline)"
    ]
