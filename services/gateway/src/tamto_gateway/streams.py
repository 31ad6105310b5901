"""Stream definitions, kept in etcd under `/tamto/streams/<name>`.

"Ensure" creates a stream if missing; when it exists with another config it
reports each difference and changes it only when asked to overwrite. The
partition count is fixed at creation (keys would move otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import aetcd

from tamto_common.errors import FailedPrecondition, InvalidArgument, NotFound
from tamto_common.names import check_name
from tamto_common.streams import STREAMS_PREFIX, StreamDef, stream_key


@dataclass(frozen=True)
class Ensured:
    stream: StreamDef
    created: bool
    differences: list[str]


def differences(stored: StreamDef, wanted: StreamDef) -> list[str]:
    return [
        f"{f.name}: stored {getattr(stored, f.name)!r}, requested {getattr(wanted, f.name)!r}"
        for f in fields(StreamDef)
        if getattr(stored, f.name) != getattr(wanted, f.name)
    ]


class StreamRegistry:
    def __init__(self, etcd: aetcd.Client, max_partitions: int) -> None:
        self._etcd = etcd
        self._max_partitions = max_partitions
        self._cache: dict[str, StreamDef] = {}

    def validate(self, wanted: StreamDef) -> None:
        check_name("stream", wanted.name)
        if not 1 <= wanted.partitions <= self._max_partitions:
            raise InvalidArgument(
                f"partitions must be between 1 and {self._max_partitions}, got {wanted.partitions}"
            )

    async def ensure(self, wanted: StreamDef, overwrite: bool) -> Ensured:
        self.validate(wanted)
        key = stream_key(wanted.name)
        tx = self._etcd.transactions
        created, _ = await self._etcd.transaction(
            compare=[tx.version(key) == 0], success=[tx.put(key, wanted.to_json())], failure=[]
        )
        if created:
            self._cache[wanted.name] = wanted
            return Ensured(wanted, True, [])
        stored = await self.describe(wanted.name, fresh=True)
        diff = differences(stored, wanted)
        if not diff or not overwrite:
            return Ensured(stored, False, diff)
        if stored.partitions != wanted.partitions:
            raise FailedPrecondition(
                f"stream {wanted.name!r} has {stored.partitions} partitions; the count is fixed "
                "at creation"
            )
        await self._etcd.put(key, wanted.to_json())
        self._cache[wanted.name] = wanted
        return Ensured(wanted, False, diff)

    async def describe(self, name: str, fresh: bool = False) -> StreamDef:
        check_name("stream", name)
        if not fresh and name in self._cache:
            return self._cache[name]
        kv = await self._etcd.get(stream_key(name))
        if kv is None:
            self._cache.pop(name, None)
            raise NotFound(f"stream {name!r} does not exist")
        stream = StreamDef.from_json(kv.value)
        self._cache[name] = stream
        return stream

    async def list(self) -> list[StreamDef]:
        result = await self._etcd.get_prefix(STREAMS_PREFIX.encode())
        return sorted((StreamDef.from_json(kv.value) for kv in result), key=lambda s: s.name)
