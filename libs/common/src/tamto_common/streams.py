"""Stream definitions as stored in etcd under `/tamto/streams/<name>`.

The gateway writes them (admin API); routers and storage read them (ack
timeouts, durability). This module is the one schema for that JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import aetcd

STREAMS_PREFIX = "/tamto/streams/"


def stream_key(name: str) -> bytes:
    return f"{STREAMS_PREFIX}{name}".encode()


@dataclass(frozen=True)
class StreamDef:
    name: str
    partitions: int
    kind: str = "persistent"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StreamDef:
        return cls(**json.loads(data))


async def read_stream(etcd: aetcd.Client, name: str) -> StreamDef | None:
    """The stored definition of `name`, or None."""
    kv = await etcd.get(stream_key(name))
    return None if kv is None else StreamDef.from_json(kv.value)
