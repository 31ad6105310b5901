"""The scenarios of the usual MQTT interoperability suite (the Eclipse Paho one's
client_test.py), run with paho-mqtt against a real gateway in single-stream mode
(`--mqtt-stream`): the suite's own free-form topics (`TopicA`, `/TopicA`, ...) and
filters (`#`, `+/+`, `/#`), QoS 0/1/2, retained messages, wills, zero-length
client ids, offline queueing, overlapping subscriptions, keep-alive, redelivery on
reconnect and a refused subscription."""

from __future__ import annotations

import asyncio
import queue
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

import tamto_sdk
from tamto_local.ports import free_port
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tests.e2e.mqtt_clients import RawClient, connect_packet, mqtt_env, publish_packet, unique

pytestmark = pytest.mark.e2e

#: The interoperability suite's topics and filters.
TOPICS = ("TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA")
WILDTOPICS = ("TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#")
STREAM = "interop"
WAIT_S = 10.0


@dataclass
class Broker:
    cluster: TestCluster
    port: int

    @property
    def credential(self) -> str:
        return self.cluster.credential


@pytest.fixture(scope="module")
def broker(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    cluster = TestCluster(tmp_path_factory.mktemp("mqtt-interop"), tamto_infra)
    port = free_port()
    try:
        cluster.start_all({"gateway": mqtt_env(port, {"TAMTO_GATEWAY_MQTT_STREAM": STREAM})})
        yield Broker(cluster, port)
    finally:
        cluster.stop_all()


@pytest.fixture(autouse=True)
def no_retained_left(broker: Broker) -> Iterator[None]:
    """Each test starts without retained messages (as the suite's cleanup does)."""
    yield
    client = Client(broker, unique("cleanup"))
    client.connect()
    for topic in TOPICS:
        client.mqtt.publish(topic, b"", qos=1, retain=True).wait_for_publish(WAIT_S)
    client.disconnect()


@dataclass
class Client:
    """A paho-mqtt client recording what it receives."""

    broker: Broker
    client_id: str
    clean_session: bool = True
    keepalive: int = 60
    password: str | None = None
    messages: queue.Queue[paho.MQTTMessage] = field(default_factory=queue.Queue)
    mqtt: paho.Client = field(init=False)

    def __post_init__(self) -> None:
        self.mqtt = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=self.clean_session,
            protocol=paho.MQTTv311,
        )
        self.mqtt.username_pw_set("interop", self.password or self.broker.credential)
        self.mqtt.on_message = lambda _c, _u, message: self._received(message)
        self.connacks: queue.Queue[tuple[bool, int]] = queue.Queue()
        self.subacks: queue.Queue[list[int]] = queue.Queue()
        self.mqtt.on_connect = lambda _c, _u, flags, rc, _p: self.connacks.put(
            (bool(flags.session_present), rc.value)
        )
        self.mqtt.on_subscribe = lambda _c, _u, _m, codes, _p: self.subacks.put(
            [c.value for c in codes]
        )

    def _received(self, message: paho.MQTTMessage) -> None:
        # The etcd of the test session is shared: retained messages other test modules
        # left on their own topics are not the suite's.
        if message.retain and message.topic not in TOPICS:
            return
        self.messages.put(message)

    def connect(self) -> bool:
        """Connect and wait for CONNACK 0; whether a session was present."""
        self.mqtt.connect("127.0.0.1", self.broker.port, keepalive=self.keepalive)
        self.mqtt.loop_start()
        present, code = self.connacks.get(timeout=WAIT_S)
        assert code == 0
        return present

    def subscribe(self, *filters: tuple[str, int]) -> list[int]:
        self.mqtt.subscribe(list(filters))
        return self.subacks.get(timeout=WAIT_S)

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool = False) -> None:
        self.mqtt.publish(topic, payload, qos=qos, retain=retain).wait_for_publish(WAIT_S)

    def receive(self, count: int) -> list[paho.MQTTMessage]:
        return [self.messages.get(timeout=WAIT_S) for _ in range(count)]

    def nothing_more(self, marker_topic: str) -> None:
        """Nothing arrives before a marker published now to `marker_topic` (which this
        client's subscriptions match)."""
        marker = uuid.uuid4().hex.encode()
        self.publish(marker_topic, marker, 1)
        message = self.messages.get(timeout=WAIT_S)
        assert (message.topic, message.payload) == (marker_topic, marker)

    def disconnect(self) -> None:
        self.mqtt.disconnect()
        self.mqtt.loop_stop()

    def vanish(self) -> None:
        """Drop the connection without DISCONNECT."""
        sock = self.mqtt.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)
        self.mqtt.loop_stop()


def forget(broker: Broker, client_id: str) -> None:
    """End a persistent session (a clean session discards it)."""
    client = Client(broker, client_id)
    client.connect()
    client.disconnect()


def test_basic(broker: Broker) -> None:
    client = Client(broker, unique("basic"))
    client.connect()
    assert client.subscribe((TOPICS[0], 2)) == [2]
    for qos in (0, 1, 2):
        client.publish(TOPICS[0], f"qos {qos}".encode(), qos)
    got = client.receive(3)
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        (TOPICS[0], b"qos 0", 0),
        (TOPICS[0], b"qos 1", 1),
        (TOPICS[0], b"qos 2", 2),
    ]
    client.disconnect()


def test_every_topic_and_filter_of_the_suite(broker: Broker) -> None:
    client = Client(broker, unique("wild"))
    client.connect()
    assert client.subscribe(*((f, 1) for f in WILDTOPICS)) == [1] * len(WILDTOPICS)
    for topic in TOPICS:
        client.publish(topic, topic.encode(), 1)
    # Each once, whatever the number of filters matching it.
    got = client.receive(len(TOPICS))
    assert sorted(m.topic for m in got) == sorted(TOPICS)
    client.publish("$internal/x", b"not for #", 1)  # `#`, `+/+` skip `$` topics
    client.nothing_more("TopicA/B")
    client.disconnect()


def test_retained_messages(broker: Broker) -> None:
    publisher = Client(broker, unique("retainer"))
    publisher.connect()
    for topic, qos in ((TOPICS[1], 0), (TOPICS[2], 1), (TOPICS[3], 2)):
        publisher.publish(topic, b"retained", qos, retain=True)
    subscriber = Client(broker, unique("late"))
    subscriber.connect()
    subscriber.subscribe((WILDTOPICS[5], 2))
    got = subscriber.receive(3)
    assert sorted((m.topic, m.qos, m.retain) for m in got) == [
        (TOPICS[2], 1, True),
        (TOPICS[1], 0, True),
        (TOPICS[3], 2, True),
    ]
    subscriber.disconnect()
    for topic in TOPICS[1:4]:  # an empty retained message clears the topic's
        publisher.publish(topic, b"", 1, retain=True)
    later = Client(broker, unique("later"))
    later.connect()
    later.subscribe((WILDTOPICS[5], 2))
    later.nothing_more(TOPICS[1])
    later.disconnect()
    publisher.disconnect()


def test_will_message(broker: Broker) -> None:
    subscriber = Client(broker, unique("will-sub"))
    subscriber.connect()
    subscriber.subscribe((TOPICS[2], 2))
    doomed = Client(broker, unique("doomed"), keepalive=2)
    doomed.mqtt.will_set(TOPICS[2], b"client not disconnected", qos=2)
    doomed.connect()
    doomed.vanish()
    (will,) = subscriber.receive(1)
    assert (will.topic, will.payload) == (TOPICS[2], b"client not disconnected")
    subscriber.disconnect()


async def test_zero_length_client_id(broker: Broker) -> None:
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet("", broker.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x00\x02"  # identifier rejected
    raw.close()
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet("", broker.credential, clean=True))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    raw.close()


def test_offline_message_queueing(broker: Broker) -> None:
    client_id = unique("offline")
    away = Client(broker, client_id, clean_session=False)
    assert away.connect() is False
    away.subscribe((WILDTOPICS[5], 2))
    away.disconnect()
    publisher = Client(broker, unique("pub"))
    publisher.connect()
    for topic, qos in ((TOPICS[1], 0), (TOPICS[2], 1), (TOPICS[3], 2)):
        publisher.publish(topic, b"while away", qos)
    publisher.disconnect()
    back = Client(broker, client_id, clean_session=False)
    assert back.connect() is True
    got = back.receive(3)  # QoS 0 ones are kept too
    assert sorted(m.topic for m in got) == sorted(TOPICS[1:4])
    back.disconnect()
    forget(broker, client_id)


def test_overlapping_subscriptions(broker: Broker) -> None:
    client = Client(broker, unique("overlap"))
    client.connect()
    assert client.subscribe((WILDTOPICS[6], 2), (WILDTOPICS[0], 1)) == [2, 1]
    client.publish(TOPICS[3], b"overlapping topic filters", 2)
    (message,) = client.receive(1)
    assert (message.topic, message.qos) == (TOPICS[3], 2)  # once, at the highest QoS
    client.nothing_more(TOPICS[1])
    client.disconnect()


async def test_keepalive(broker: Broker) -> None:
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(unique("silent"), broker.credential, keep_alive=2))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    assert await raw.closed(timeout_s=WAIT_S)  # silent for 1.5 times its keep-alive


async def test_redelivery_on_reconnect(broker: Broker) -> None:
    client_id = unique("redeliver")
    paused = await RawClient.open(broker.port)  # acknowledges nothing it receives
    await paused.send(connect_packet(client_id, broker.credential, clean=False))
    assert await paused.read(4) == b"\x20\x02\x00\x00"
    assert (await paused.subscribe(WILDTOPICS[6], 2))[-1] == 2
    publisher = Client(broker, unique("pub"))
    await asyncio.to_thread(publisher.connect)
    await asyncio.to_thread(publisher.publish, TOPICS[1], b"qos 1", 1)
    await asyncio.to_thread(publisher.publish, TOPICS[3], b"qos 2", 2)
    first = {(await paused.next_publish())[0] & 0x06 for _ in range(2)}
    assert first == {0x02, 0x04}  # QoS 1 and QoS 2, neither acknowledged
    paused.close()
    publisher.disconnect()
    back = Client(broker, client_id, clean_session=False)
    assert await asyncio.to_thread(back.connect) is True
    again = await asyncio.to_thread(back.receive, 2)
    assert sorted((m.payload, m.qos, m.dup) for m in again) == [
        (b"qos 1", 1, True),
        (b"qos 2", 2, True),
    ]
    back.disconnect()
    await asyncio.to_thread(forget, broker, client_id)


async def test_subscribe_failure(broker: Broker) -> None:
    identity, role = unique("publisher"), unique("publisher-role")
    async with await tamto_sdk.connect(broker.cluster.url, api_key=broker.credential) as admin:
        await admin.security.create_identity(identity)
        key = (await admin.security.create_api_key(identity)).api_key
        await admin.security.put_role(role, [Grant(Permission.PUBLISH, STREAM)])
        await admin.security.bind(identity, role)
    client = Client(broker, unique("nosub"), password=key)
    client.connect()
    assert client.subscribe(("test/nosubscribe", 2)) == [0x80]
    client.disconnect()


def qos2_publish(topic: str, payload: bytes, packet_id: int, dup: bool = False) -> bytes:
    packet = publish_packet(topic, payload, packet_id)
    return bytes([0x3C if dup else 0x34]) + packet[1:]


async def test_qos2_resend_while_the_first_is_queued_is_stored_once(broker: Broker) -> None:
    subscriber = Client(broker, unique("q2-sub"))
    await asyncio.to_thread(subscriber.connect)
    await asyncio.to_thread(subscriber.subscribe, ("q2/once", 2))
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(unique("q2"), broker.credential))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    first, again = qos2_publish("q2/once", b"once", 9), qos2_publish("q2/once", b"once", 9, True)
    await raw.send(first + again)  # the resend arrives before the first is stored
    assert await raw.read(8) == b"\x50\x02\x00\x09" * 2  # PUBREC for each
    await raw.send(b"\x62\x02\x00\x09")  # PUBREL
    assert await raw.read(4) == b"\x70\x02\x00\x09"  # PUBCOMP
    raw.close()
    (message,) = await asyncio.to_thread(subscriber.receive, 1)
    assert message.payload == b"once"
    await asyncio.to_thread(subscriber.nothing_more, "q2/once")
    subscriber.disconnect()


async def test_qos2_publish_is_exactly_once_across_a_reconnect(broker: Broker) -> None:
    subscriber = Client(broker, unique("q2-sub"))
    await asyncio.to_thread(subscriber.connect)
    await asyncio.to_thread(subscriber.subscribe, ("q2/reconnect", 2))
    client_id = unique("q2-persistent")
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(client_id, broker.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    await raw.send(qos2_publish("q2/reconnect", b"exactly once", 4))
    assert await raw.read(4) == b"\x50\x02\x00\x04"  # PUBREC, then the connection drops
    raw.close()
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(client_id, broker.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x01\x00"  # session present
    await raw.send(qos2_publish("q2/reconnect", b"exactly once", 4, dup=True))
    assert await raw.read(4) == b"\x50\x02\x00\x04"  # known: answered, not stored
    await raw.send(b"\x62\x02\x00\x04")
    assert await raw.read(4) == b"\x70\x02\x00\x04"
    raw.close()
    (message,) = await asyncio.to_thread(subscriber.receive, 1)
    assert message.payload == b"exactly once"
    await asyncio.to_thread(subscriber.nothing_more, "q2/reconnect")
    subscriber.disconnect()
    await asyncio.to_thread(forget, broker, client_id)


async def test_qos2_delivery_resends_pubrel_not_the_message_after_a_reconnect(
    broker: Broker,
) -> None:
    client_id = unique("q2-receiver")
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(client_id, broker.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    assert (await raw.subscribe("q2/out", 2))[-1] == 2
    publisher = Client(broker, unique("pub"))
    await asyncio.to_thread(publisher.connect)
    await asyncio.to_thread(publisher.publish, "q2/out", b"delivered once", 2)
    first, packet_id, payload = await raw.next_publish()
    assert (first & 0x06, payload) == (0x04, b"delivered once")
    pid = packet_id.to_bytes(2, "big")
    await raw.send(b"\x50\x02" + pid)  # PUBREC
    assert await raw.read(4) == b"\x62\x02" + pid  # PUBREL, then the connection drops
    raw.close()
    raw = await RawClient.open(broker.port)
    await raw.send(connect_packet(client_id, broker.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x01\x00"
    assert await raw.read(4) == b"\x62\x02" + pid  # PUBREL again, no PUBLISH
    await raw.send(b"\x70\x02" + pid)  # PUBCOMP
    await asyncio.to_thread(publisher.publish, "q2/out", b"next", 1)
    first, _, payload = await raw.next_publish()
    assert payload == b"next"  # the QoS 2 message was not sent again
    raw.close()
    publisher.disconnect()
    await asyncio.to_thread(forget, broker, client_id)
