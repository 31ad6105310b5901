"""What MQTT keeps for the whole cluster, in etcd: persistent sessions and retained
messages, so a client may reconnect to any gateway and find them.

- `/tamto/mqtt/sessions/<client id>`: a session of clean session 0: the identity
  that owns it and its subscriptions (filter -> QoS). Its QoS 1 messages wait in
  a durable Tamto subscription per stream (`subscription_name`), not here.
- `/tamto/mqtt/retained/<topic>`: the retained message of an MQTT topic (QoS and
  payload); an empty retained payload deletes it (MQTT-3.3.1-10).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aetcd

    from tamto_gateway.mqtt.topics import Address, TopicRule

SESSIONS_PREFIX = "/tamto/mqtt/sessions/"
RETAINED_PREFIX = "/tamto/mqtt/retained/"


@dataclass(slots=True)
class StoredSession:
    """A persistent session as kept in etcd."""

    subject: str
    subscriptions: dict[str, int] = field(default_factory=dict)
    #: QoS 2 packet ids received from the client and not yet released (PUBREL), each
    #: with the Tamto message id its message is stored under (the stream's dedup).
    received: dict[int, str] = field(default_factory=dict)
    #: QoS 2 packet ids delivered to the client and PUBREC'd, awaiting PUBCOMP.
    releasing: list[int] = field(default_factory=list)

    def encode(self) -> bytes:
        value = {
            "subject": self.subject,
            "subscriptions": self.subscriptions,
            "received": {str(k): v for k, v in self.received.items()},
            "releasing": self.releasing,
        }
        return json.dumps(value).encode()

    @classmethod
    def decode(cls, raw: bytes) -> StoredSession:
        value = json.loads(raw)
        return cls(
            str(value["subject"]),
            {str(k): int(v) for k, v in value["subscriptions"].items()},
            {int(k): str(v) for k, v in value.get("received", {}).items()},
            [int(i) for i in value.get("releasing", [])],
        )


@dataclass(frozen=True, slots=True)
class Retained:
    topic: str
    payload: bytes
    qos: int


def subscription_name(client_id: str) -> str:
    """The durable Tamto subscription holding a persistent session's messages on each
    stream it subscribes to (a legal name whatever the client id)."""
    return "mqtt-" + hashlib.sha256(client_id.encode()).hexdigest()[:32]


class MqttState:
    """Reads and writes the cluster's MQTT state (module docstring)."""

    def __init__(self, etcd: aetcd.Client) -> None:
        self._etcd = etcd

    async def session(self, client_id: str) -> StoredSession | None:
        kv = await self._etcd.get(f"{SESSIONS_PREFIX}{client_id}".encode())
        return None if kv is None else StoredSession.decode(kv.value)

    async def save_session(self, client_id: str, session: StoredSession) -> None:
        await self._etcd.put(f"{SESSIONS_PREFIX}{client_id}".encode(), session.encode())

    async def drop_session(self, client_id: str) -> None:
        await self._etcd.delete(f"{SESSIONS_PREFIX}{client_id}".encode())

    async def retain(self, topic: str, payload: bytes, qos: int) -> None:
        key = f"{RETAINED_PREFIX}{topic}".encode()
        if not payload:
            await self._etcd.delete(key)
            return
        value = {"qos": qos, "payload": base64.b64encode(payload).decode()}
        await self._etcd.put(key, json.dumps(value).encode())

    async def retained(self, rule: TopicRule, address: Address) -> list[Retained]:
        """The retained messages of a filter's stream levels whose topic matches the
        filter's levels after them (by `rule`: all levels with a single stream)."""
        prefix = address.prefix
        start = len(RETAINED_PREFIX)
        out = []
        for kv in await self._etcd.get_prefix(f"{RETAINED_PREFIX}{prefix}".encode()):
            topic = kv.key.decode()[start:]
            if not prefix:
                rest = tuple(topic.split("/"))
            elif topic == prefix:
                rest = ()
            elif topic.startswith(f"{prefix}/"):
                rest = tuple(topic[len(prefix) + 1 :].split("/"))
            else:
                continue
            if rule.matches(address.rest, rest):
                value = json.loads(kv.value)
                out.append(Retained(topic, base64.b64decode(value["payload"]), int(value["qos"])))
        return out
