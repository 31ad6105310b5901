"""Stream definitions as stored in etcd under `/tamto/streams/<name>`.

The gateway writes them (admin API); routers and storage read them (ack
timeouts, dead-lettering, durability). This module is the one schema for that
JSON, and the one place where the defaults and limits of every setting live.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from tamto_common.errors import InvalidArgument
from tamto_common.names import MAX_NAME_LENGTH, check_name

if TYPE_CHECKING:  # only annotates read_stream; the CLI imports the defaults without it
    import aetcd

STREAMS_PREFIX = "/tamto/streams/"

Durability = Literal["group", "interval"]
DURABILITIES: Final[tuple[Durability, ...]] = ("group", "interval")
#: "limits": only `retention_ms` / `retention_bytes` remove messages. "interest":
#: a message also goes once every subscription has acked it (the limits still apply).
RetentionPolicy = Literal["limits", "interest"]
RETENTION_POLICIES: Final[tuple[RetentionPolicy, ...]] = ("limits", "interest")
KINDS: Final = ("persistent", "ephemeral")
#: What an ephemeral consumer's full buffer drops ("" on persistent streams).
Overflow = Literal["drop_oldest", "drop_newest"]
OVERFLOWS: Final[tuple[Overflow, ...]] = ("drop_oldest", "drop_newest")
DEFAULT_BUFFER_MESSAGES: Final = 10_000
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30_000
#: Allowed ranges of the ephemeral-only settings.
EPHEMERAL_LIMITS: Final[dict[str, Limit]] = {}

#: Defaults of the settings whose zero value is not "off".
DEFAULT_DEDUP_WINDOW_MS: Final = 2 * 60 * 1000
DEFAULT_ACK_TIMEOUT_MS: Final = 30 * 1000
DEFAULT_FSYNC_INTERVAL_MS: Final = 50
#: Replication: the default R is min(DEFAULT_MAX_REPLICATION, live storage nodes) and
#: the default Q a majority of R (docs/cluster.md section 2).
DEFAULT_MAX_REPLICATION: Final = 3
#: The most partitions a stream may have, unless a gateway is configured otherwise.
MAX_PARTITIONS: Final = 1024
DEAD_LETTER_SUFFIX: Final = ".dlq"

_MAX_INT64: Final = 2**63 - 1
_DAY_MS: Final = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class Limit:
    """The allowed range of one numeric setting; `zero` names what 0 means, if allowed."""

    minimum: int
    maximum: int
    zero: str = ""

    def describe(self) -> str:
        low = 0 if self.zero else self.minimum
        text = f"between {low} and {self.maximum}"
        return f"{text} (0: {self.zero})" if self.zero else text


#: Allowed range of every numeric setting (partitions: see `max_partitions` of `validate`).
LIMITS: Final[dict[str, Limit]] = {
    "retention_ms": Limit(1, _MAX_INT64, "forever"),
    "retention_bytes": Limit(1, _MAX_INT64, "unbounded"),
    "dedup_window_ms": Limit(1, 7 * _DAY_MS),
    "ack_timeout_ms": Limit(100, _DAY_MS),
    "max_deliveries": Limit(1, 10_000, "never dead-letter"),
    "max_lag": Limit(1, _MAX_INT64, "never dead-letter"),
    "fsync_interval_ms": Limit(1, 60_000),
}


EPHEMERAL_LIMITS.update(
    buffer_messages=Limit(1, 1_000_000),
    request_timeout_ms=Limit(1, 600_000),
)


def stream_key(name: str) -> bytes:
    """The etcd key holding the definition of stream `name`."""
    return f"{STREAMS_PREFIX}{name}".encode()


@dataclass(frozen=True)
class StreamDef:
    """A stream's name and configuration, as stored in etcd.

    Attributes:
        name: the stream name (see `tamto_common.names`).
        partitions: partition count, fixed at creation.
        kind: "persistent" or "ephemeral" (at-most-once, never stored; see
            docs/ephemeral.md). An ephemeral stream has one partition and uses
            only the three ephemeral settings below; the others keep their defaults.
        retention_ms: keep messages at least this long; 0 keeps them forever.
        retention_bytes: per partition; 0 is unbounded.
        retention_policy: "limits" (only the two limits above remove messages) or
            "interest" (also remove a message once every subscription on its
            partition has acked it; a partition no subscription has reached yet
            keeps everything). The limits apply under either policy.
        dedup_window_ms: how long a message id is remembered for dedup.
        ack_timeout_ms: a delivered message unacked this long is redelivered.
        max_deliveries: deliveries before a message is dead-lettered; 0 never.
        max_lag: an unacked message this many offsets behind the newest delivered
            one is dead-lettered; 0 never.
        dead_letter_stream: where dead letters go; "" means `<name>.dlq`
            (use `dead_letter` for the effective name).
        durability: "group" (fsync per group commit) or "interval" (fsync at most
            every `fsync_interval_ms`; acks still wait for it).
        fsync_interval_ms: with "interval" durability only; 0 otherwise.
        buffer_messages: ephemeral only: messages held per consumer (0 on persistent).
        overflow: ephemeral only: what a full buffer drops ("" on persistent).
        request_timeout_ms: ephemeral only: a request's default wait for its reply.
        replication_factor: persistent only: R, the storage nodes holding every entry
            of a ledger (1 for definitions stored before replication existed).
        ack_quorum: persistent only: Q, the replicas that must have an entry fsynced
            before it is acknowledged (1 <= Q <= R).
    """

    name: str
    partitions: int
    kind: str = "persistent"
    retention_ms: int = 0
    retention_bytes: int = 0
    retention_policy: RetentionPolicy = "limits"
    dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS
    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    max_deliveries: int = 0
    max_lag: int = 0
    dead_letter_stream: str = ""
    durability: Durability = "group"
    fsync_interval_ms: int = 0
    buffer_messages: int = 0
    overflow: Overflow | Literal[""] = ""
    request_timeout_ms: int = 0
    replication_factor: int = 1
    ack_quorum: int = 1

    @property
    def ephemeral(self) -> bool:
        """Whether this is an ephemeral stream (at-most-once, never stored)."""
        return self.kind == "ephemeral"

    @property
    def dead_letter(self) -> str:
        """The effective dead-letter stream: the configured one or `<name>.dlq`."""
        return self.dead_letter_stream or f"{self.name}{DEAD_LETTER_SUFFIX}"

    @property
    def dead_lettering(self) -> bool:
        """Whether any rule moves messages to the dead-letter stream."""
        return self.max_deliveries > 0 or self.max_lag > 0

    def normalized(self) -> StreamDef:
        """The same definition in canonical form.

        A dead-letter stream equal to the default becomes "", and "interval"
        durability without an interval gets the default interval; two
        definitions that behave the same then compare equal.
        """
        default_dead_letter = f"{self.name}{DEAD_LETTER_SUFFIX}"
        interval = self.fsync_interval_ms
        if self.durability == "interval" and interval == 0:
            interval = DEFAULT_FSYNC_INTERVAL_MS
        return replace(
            self,
            dead_letter_stream=(
                "" if self.dead_letter_stream == default_dead_letter else self.dead_letter_stream
            ),
            fsync_interval_ms=interval,
        )

    def with_replication_defaults(self, storage_nodes: int) -> StreamDef:
        """This definition with R and Q chosen where they are 0 ("the default").

        R: min(3, `storage_nodes`) (1 while no storage node is registered); Q: a
        majority of R. Applied once, at creation: a stored definition keeps its values.
        """
        if self.ephemeral:
            return self
        replication = self.replication_factor or max(1, min(DEFAULT_MAX_REPLICATION, storage_nodes))
        quorum = self.ack_quorum or replication // 2 + 1
        return replace(self, replication_factor=replication, ack_quorum=quorum)

    def validate(
        self, max_partitions: int = MAX_PARTITIONS, storage_nodes: int | None = None
    ) -> None:
        """Raise `InvalidArgument` naming the first field that is out of its allowed range.

        With `storage_nodes` (the live storage nodes), a replication factor above it
        is refused too: a new ledger could not find that many nodes.
        """
        check_name("stream", self.name)
        if self.kind not in KINDS:
            raise InvalidArgument(f"kind must be one of {_choices(KINDS)}, got {self.kind!r}")
        if self.ephemeral:
            self._validate_ephemeral()
            return
        for name in EPHEMERAL_LIMITS:
            if getattr(self, name) != 0:
                raise InvalidArgument(f"{name} applies only to ephemeral streams")
        if self.overflow:
            raise InvalidArgument("overflow applies only to ephemeral streams")
        _check_int("partitions", self.partitions, Limit(1, max_partitions))
        for name, limit in LIMITS.items():
            if name != "fsync_interval_ms":
                _check_int(name, getattr(self, name), limit)
        if self.retention_policy not in RETENTION_POLICIES:
            raise InvalidArgument(
                f"retention_policy must be one of {_choices(RETENTION_POLICIES)}, "
                f"got {self.retention_policy!r}"
            )
        if self.durability not in DURABILITIES:
            raise InvalidArgument(
                f"durability must be one of {_choices(DURABILITIES)}, got {self.durability!r}"
            )
        if self.durability == "interval":
            _check_int("fsync_interval_ms", self.fsync_interval_ms, LIMITS["fsync_interval_ms"])
        elif self.fsync_interval_ms != 0:
            raise InvalidArgument(
                f"fsync_interval_ms applies only with durability 'interval', got "
                f"{self.fsync_interval_ms} with durability {self.durability!r}"
            )
        if self.dead_letter_stream:
            check_name("dead_letter_stream", self.dead_letter_stream)
        elif self.dead_lettering and len(self.dead_letter) > MAX_NAME_LENGTH:
            raise InvalidArgument(
                f"dead_letter_stream: the default {self.dead_letter[:200]!r} is longer than "
                f"{MAX_NAME_LENGTH} characters; name a dead-letter stream explicitly"
            )
        if self.dead_letter == self.name:
            raise InvalidArgument(
                f"dead_letter_stream must differ from the stream itself ({self.name!r})"
            )
        self._validate_replication(storage_nodes)

    def _validate_replication(self, storage_nodes: int | None) -> None:
        _check_int("replication_factor", self.replication_factor, Limit(1, 2**32 - 1))
        if storage_nodes is not None and self.replication_factor > storage_nodes:
            raise InvalidArgument(
                f"replication_factor {self.replication_factor} is more than the "
                f"{storage_nodes} live storage node(s)"
            )
        if not isinstance(self.ack_quorum, int) or isinstance(self.ack_quorum, bool):
            raise InvalidArgument(f"ack_quorum must be an integer, got {self.ack_quorum!r}")
        if self.ack_quorum < 1:
            raise InvalidArgument(f"ack_quorum must be at least 1, got {self.ack_quorum}")
        if self.ack_quorum > self.replication_factor:
            raise InvalidArgument(
                f"ack_quorum {self.ack_quorum} is more than replication_factor "
                f"{self.replication_factor}"
            )

    def _validate_ephemeral(self) -> None:
        if self.partitions != 1:
            raise InvalidArgument(
                f"an ephemeral stream has no partitions to choose: partitions must be 0 or 1, "
                f"got {self.partitions}"
            )
        for name, limit in EPHEMERAL_LIMITS.items():
            _check_int(name, getattr(self, name), limit)
        if self.overflow not in OVERFLOWS:
            raise InvalidArgument(
                f"overflow must be one of {_choices(OVERFLOWS)}, got {self.overflow!r}"
            )

    def differences(self, other: StreamDef) -> list[str]:
        """How `other` differs from this definition, one line per setting.

        Each line reads ``"<field>: stored <this>, requested <other>"``; both sides
        are compared in canonical form (see `normalized`).
        """
        mine, theirs = self.normalized(), other.normalized()
        return [
            f"{f.name}: stored {_show(mine, f.name)}, requested {_show(theirs, f.name)}"
            for f in fields(StreamDef)
            if f.name != "name" and getattr(mine, f.name) != getattr(theirs, f.name)
        ]

    def to_json(self) -> bytes:
        """The JSON stored in etcd."""
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StreamDef:
        """Parse stored JSON; fields missing (older writers) take their defaults and
        fields unknown (newer writers) are ignored."""
        raw: dict[str, Any] = json.loads(data)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def _show(stream: StreamDef, field: str) -> str:
    if field == "dead_letter_stream":
        return repr(stream.dead_letter)
    return repr(getattr(stream, field))


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def _check_int(field: str, value: object, limit: Limit) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{field} must be an integer, got {value!r}")
    if value == 0 and limit.zero:
        return
    if not limit.minimum <= value <= limit.maximum:
        raise InvalidArgument(f"{field} must be {limit.describe()}, got {value}")


async def read_stream(etcd: aetcd.Client, name: str) -> StreamDef | None:
    """The stored definition of `name`, or None."""
    kv = await etcd.get(stream_key(name))
    return None if kv is None else StreamDef.from_json(kv.value)
