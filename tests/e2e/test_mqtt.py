"""The gateway's MQTT 3.1.1 broker end to end, with real clients (aiomqtt, paho-mqtt,
mosquitto_pub/sub) against a real two-gateway system."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import queue
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

import tamto_sdk
from tamto_sdk import EphemeralConfig
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.needs import needs
from tamto_testing.waiting import eventually
from tests.doc_blocks import code_blocks
from tests.e2e.mqtt_clients import (
    MqttCluster,
    RawClient,
    connect_packet,
    publish_packet,
    start_mqtt,
    unique,
)

pytestmark = pytest.mark.e2e

#: The gateways' --mqtt-max-inflight (a small one, for the limit's test).
INFLIGHT = 8


@pytest.fixture(scope="module")
def mqtt(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttCluster]:
    cluster = TestCluster(tmp_path_factory.mktemp("mqtt"), tamto_infra)
    try:
        yield start_mqtt(cluster, {"TAMTO_GATEWAY_MQTT_MAX_INFLIGHT": str(INFLIGHT)})
    finally:
        cluster.stop_all()


async def persistent_stream(mqtt: MqttCluster, partitions: int = 2) -> str:
    name = unique("mq")
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as client:
        await client.streams.ensure(name, partitions=partitions)
    return name


async def ephemeral_stream(mqtt: MqttCluster) -> str:
    name = unique("eph")
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as client:
        await client.streams.ensure(name, config=EphemeralConfig())
    return name


def client(
    mqtt: MqttCluster, gateway: str = "gateway", password: str | None = None, **kwargs: object
) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1",
        mqtt.ports[gateway],
        username="app",
        password=mqtt.credential if password is None else password,
        **kwargs,  # type: ignore[arg-type]
    )


def codes(granted: object) -> list[int]:
    """SUBACK's return codes as aiomqtt hands them (ints, or paho's ReasonCodes)."""
    assert isinstance(granted, list | tuple)
    return [g if isinstance(g, int) else int(g.value) for g in granted]


async def receive(
    subscriber: aiomqtt.Client, count: int, timeout_s: float = 20
) -> list[aiomqtt.Message]:
    out: list[aiomqtt.Message] = []
    async with asyncio.timeout(timeout_s):
        async for message in subscriber.messages:
            out.append(message)
            if len(out) == count:
                return out
    return out


async def nothing_more(subscriber: aiomqtt.Client, wait_s: float = 1.0) -> None:
    got = []
    with contextlib.suppress(TimeoutError):
        got = await receive(subscriber, 1, wait_s)
    assert not got, f"unexpected message on {got[0].topic}"


async def test_qos1_to_a_persistent_stream_is_stored_and_delivered(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as subscriber, client(mqtt) as publisher:
        granted = await subscriber.subscribe(f"{stream}/sensors/+/temp", qos=1)
        assert codes(granted) == [1]
        await publisher.publish(f"{stream}/sensors/k1/temp", b"21.5", qos=1)
        await publisher.publish(f"{stream}/sensors/k1/humidity", b"40", qos=1)
        await publisher.publish(f"{stream}/sensors/k2/temp", b"19", qos=0)
        got = await receive(subscriber, 2)
        assert {(m.topic.value, m.payload, m.qos) for m in got} == {
            (f"{stream}/sensors/k1/temp", b"21.5", 1),
            (f"{stream}/sensors/k2/temp", b"19", 0),  # never above the QoS published with
        }
        await nothing_more(subscriber)
    # Stored before PUBACK: the SDK reads all three back, keyed by the MQTT topic.
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as sdk:
        async with sdk.consumer(stream, "check", start=tamto_sdk.Start.earliest()) as c:
            keys = set()
            async with asyncio.timeout(20):
                async for message in c:
                    keys.add(message.key)
                    c.ack(message)
                    if len(keys) == 3:
                        break
    assert keys == {b"sensors/k1/temp", b"sensors/k1/humidity", b"sensors/k2/temp"}


async def test_hash_wildcard_matches_the_parent_and_everything_below(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as subscriber, client(mqtt) as publisher:
        await subscriber.subscribe(f"{stream}/a/#", qos=1)
        for topic in ("a", "a/b", "a/b/c", "b/a", ""):
            await publisher.publish(f"{stream}/{topic}".rstrip("/"), topic.encode(), qos=1)
        got = await receive(subscriber, 3)
        assert sorted(m.topic.value for m in got) == [
            f"{stream}/a",
            f"{stream}/a/b",
            f"{stream}/a/b/c",
        ]
        await nothing_more(subscriber)


async def test_ephemeral_stream_qos0_with_wildcards_across_gateways(mqtt: MqttCluster) -> None:
    stream = await ephemeral_stream(mqtt)
    async with client(mqtt, "gateway-2") as subscriber, client(mqtt) as publisher:
        granted = await subscriber.subscribe(f"{stream}/eu/+/created", qos=1)
        assert codes(granted) == [0]  # at most once

        got: list[aiomqtt.Message] = []

        async def delivered() -> bool:
            await publisher.publish(f"{stream}/eu/fr/created", b"x", qos=1)
            await publisher.publish(f"{stream}/eu/fr/deleted", b"no", qos=1)
            with contextlib.suppress(TimeoutError):
                got.extend(await receive(subscriber, 1, timeout_s=0.5))
            return bool(got)

        # The subscription is live on its own gateway at once; it reaches the other
        # through the bus, at once too.
        await eventually(delivered, 20, "an ephemeral message across gateways")
        assert {(m.topic.value, m.qos) for m in got} == {(f"{stream}/eu/fr/created", 0)}


async def test_overlapping_filters_on_an_ephemeral_stream_deliver_once(mqtt: MqttCluster) -> None:
    stream = await ephemeral_stream(mqtt)
    async with client(mqtt) as subscriber, client(mqtt) as publisher:
        granted = await subscriber.subscribe([(f"{stream}/a/#", 0), (f"{stream}/a/+", 0)])
        assert codes(granted) == [0, 0]
        await publisher.publish(f"{stream}/a/b", b"one", qos=1)
        await publisher.publish(f"{stream}/a", b"two", qos=1)  # `a/#` alone
        await publisher.publish(f"{stream}/z", b"none", qos=1)
        got = await receive(subscriber, 2)
        assert [(m.topic.value, m.payload) for m in got] == [
            (f"{stream}/a/b", b"one"),
            (f"{stream}/a", b"two"),
        ]
        await nothing_more(subscriber)
        await subscriber.unsubscribe(f"{stream}/a/#")  # `a/+` stays
        await publisher.publish(f"{stream}/a", b"no longer", qos=1)
        await publisher.publish(f"{stream}/a/c", b"three", qos=1)
        (message,) = await receive(subscriber, 1)
        assert message.payload == b"three"


async def test_persistent_stream_across_gateways(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt, "gateway-2") as subscriber, client(mqtt) as publisher:
        await subscriber.subscribe(f"{stream}/#", qos=1)
        await publisher.publish(f"{stream}/x", b"from one", qos=1)
        got = await receive(subscriber, 1)
        assert (got[0].topic.value, got[0].payload) == (f"{stream}/x", b"from one")


async def test_retained_messages_reach_later_subscribers_on_any_gateway(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as publisher:
        await publisher.publish(f"{stream}/state/door", b"open", qos=1, retain=True)
        await publisher.publish(f"{stream}/state/window", b"shut", qos=0, retain=True)
        await publisher.publish(f"{stream}/other", b"no", qos=1, retain=True)
    async with client(mqtt, "gateway-2") as late:
        await late.subscribe(f"{stream}/state/+", qos=1)
        got = await receive(late, 2)
        assert {(m.topic.value, m.payload, m.retain, m.qos) for m in got} == {
            (f"{stream}/state/door", b"open", True, 1),
            (f"{stream}/state/window", b"shut", True, 0),
        }
    async with client(mqtt) as publisher:  # an empty retained payload clears it
        await publisher.publish(f"{stream}/state/door", b"", qos=1, retain=True)
    async with client(mqtt) as later:
        await later.subscribe(f"{stream}/state/+", qos=1)
        got = await receive(later, 1)
        assert got[0].topic.value == f"{stream}/state/window"
        await nothing_more(later)


async def test_last_will_is_published_when_a_client_vanishes(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    will_topic = f"{stream}/status/dev1"
    async with client(mqtt) as watcher:
        await watcher.subscribe(f"{stream}/status/#", qos=1)
        raw = await RawClient.open(mqtt.ports["gateway"])
        will = (
            b"\x00\x04MQTT\x04"
            + bytes([0x02 | 0x04 | 0x08 | 0xC0])  # clean, will QoS 1, user name, password
            + (60).to_bytes(2, "big")
        )
        body = will
        for part in ("dev1", will_topic):
            body += len(part.encode()).to_bytes(2, "big") + part.encode()
        body += b"\x00\x04gone"
        for part in ("user", mqtt.credential):
            body += len(part.encode()).to_bytes(2, "big") + part.encode()
        await raw.send(bytes([0x10, len(body)]) + body)
        assert await raw.read(4) == b"\x20\x02\x00\x00"
        raw.writer.transport.abort()  # no DISCONNECT
        got = await receive(watcher, 1)
        assert (got[0].topic.value, got[0].payload) == (will_topic, b"gone")


async def test_no_will_after_a_clean_disconnect(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as watcher:
        await watcher.subscribe(f"{stream}/#", qos=1)
        will = aiomqtt.Will(f"{stream}/will", b"gone", qos=1)
        async with client(mqtt, will=will):
            pass
        await nothing_more(watcher, 2)


async def test_a_persistent_session_survives_reconnecting_to_another_gateway(
    mqtt: MqttCluster,
) -> None:
    stream = await persistent_stream(mqtt)
    client_id = unique("device")
    async with client(mqtt, identifier=client_id, clean_session=False) as first:
        await first.subscribe(f"{stream}/cmd/#", qos=1)
    async with client(mqtt) as publisher:
        for index in range(5):
            await publisher.publish(f"{stream}/cmd/{index}", str(index).encode(), qos=1)
    # Back on the other gateway: the subscription and the messages are there.
    async with client(mqtt, "gateway-2", identifier=client_id, clean_session=False) as back:
        got = await receive(back, 5)
        assert sorted(m.payload for m in got) == [b"0", b"1", b"2", b"3", b"4"]
    durable = f"mqtt-{hashlib.sha256(client_id.encode()).hexdigest()[:32]}"
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as sdk:
        assert durable in await sdk.subscriptions.list(stream)
        # A clean session discards it, its durable subscription too.
        async with client(mqtt, identifier=client_id, clean_session=True) as clean:
            async with client(mqtt) as publisher:
                await publisher.publish(f"{stream}/cmd/9", b"9", qos=1)
            await nothing_more(clean)

            async def deleted() -> bool:
                return durable not in await sdk.subscriptions.list(stream)

            await eventually(deleted, 20, "the session's subscription deleted")
    async with client(mqtt, identifier=client_id, clean_session=False) as fresh:
        await nothing_more(fresh)  # no session left: nothing subscribed, nothing waiting


async def test_unacked_qos1_messages_come_again_with_dup(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt, partitions=1)
    client_id = unique("slow")
    raw = await RawClient.open(mqtt.ports["gateway"])
    await raw.send(connect_packet(client_id, mqtt.credential, clean=False))
    assert await raw.read(4) == b"\x20\x02\x00\x00"  # no session yet
    assert await raw.subscribe(f"{stream}/t", 1) == b"\x90\x03\x00\x01\x01"
    async with client(mqtt) as publisher:
        await publisher.publish(f"{stream}/t", b"once", qos=1)
    first, packet_id, payload = await raw.next_publish()
    assert (first, payload) == (0x32, b"once")  # QoS 1, not DUP
    raw.close()  # without PUBACK
    again = await RawClient.open(mqtt.ports["gateway-2"])
    await again.send(connect_packet(client_id, mqtt.credential, clean=False))
    assert await again.read(4) == b"\x20\x02\x01\x00"  # session present
    first, packet_id, payload = await again.next_publish()
    assert (first, payload) == (0x3A, b"once")  # QoS 1, DUP
    await again.send(b"\x40\x02" + packet_id.to_bytes(2, "big"))  # PUBACK
    again.close()


async def test_paho_publishes_and_receives(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    await asyncio.to_thread(_paho_round_trip, mqtt, stream)


def _paho_round_trip(mqtt: MqttCluster, stream: str) -> None:
    subscribed, received = threading.Event(), queue.Queue[paho.MQTTMessage]()
    paho_client = paho.Client(CallbackAPIVersion.VERSION2, client_id=unique("paho"))
    paho_client.username_pw_set("app", mqtt.credential)
    paho_client.on_subscribe = lambda *_: subscribed.set()
    paho_client.on_message = lambda _c, _u, message: received.put(message)
    paho_client.connect("127.0.0.1", mqtt.ports["gateway"])
    paho_client.loop_start()
    try:
        paho_client.subscribe(f"{stream}/+/b", qos=1)
        assert subscribed.wait(20)
        info = paho_client.publish(f"{stream}/a/b", b"paho", qos=1)
        info.wait_for_publish(20)  # its PUBACK: stored
        message = received.get(timeout=20)
        assert (message.topic, message.payload, message.qos) == (f"{stream}/a/b", b"paho", 1)
    finally:
        paho_client.disconnect()
        paho_client.loop_stop()


async def test_a_subscription_the_identity_may_not_have_gets_0x80(mqtt: MqttCluster) -> None:
    allowed, forbidden = await persistent_stream(mqtt), await persistent_stream(mqtt)
    identity, role = unique("reader"), unique("reader-role")
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as admin:
        await admin.security.create_identity(identity)
        key = (await admin.security.create_api_key(identity)).api_key
        await admin.security.put_role(role, [Grant(Permission.CONSUME, allowed)])
        await admin.security.bind(identity, role)
    async with client(mqtt, password=key) as reader:
        granted = await reader.subscribe(
            [(f"{forbidden}/#", 1), (f"{allowed}/#", 1), ("+/x", 0), ("no-such-stream/#", 0)]
        )
        assert codes(granted) == [0x80, 1, 0x80, 0x80]
    # Publishing needs its permission: no PUBACK (3.1.1 has no refusal), the
    # connection is closed at once.
    raw = await RawClient.open(mqtt.ports["gateway"])
    await raw.send(connect_packet(unique("r"), key))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    await raw.send(publish_packet(f"{allowed}/x", b"no", packet_id=7))
    assert await raw.read(4, 5) == b""
    raw.close()
    audit = mqtt.cluster.audit_file("gateway").read_text().splitlines()
    denials = [json.loads(line) for line in audit if identity in line]
    assert {d["action"] for d in denials if d["outcome"] == "denied"} >= {
        "MqttSubscribe",
        "Publish",
    }
    assert all(d["source"].startswith("mqtt:") for d in denials)


async def test_connect_refusals(mqtt: MqttCluster) -> None:
    port = mqtt.ports["gateway"]
    cases = [
        (connect_packet("a", None), 5),  # no credentials
        (connect_packet("a", "not-a-key"), 4),  # a refused API key
        (connect_packet("a", mqtt.credential, level=5), 1),  # MQTT 5 is not served
        (connect_packet("", mqtt.credential, clean=False), 2),  # no id for a session
    ]
    for packet, code in cases:
        raw = await RawClient.open(port)
        await raw.send(packet)
        assert await raw.read(4) == bytes([0x20, 0x02, 0x00, code])
        assert await raw.closed()


async def test_malformed_packets_close_that_connection_alone(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    port = mqtt.ports["gateway"]
    async with client(mqtt) as bystander:
        await bystander.subscribe(f"{stream}/#", qos=1)
        bad = [
            b"\x30\xff\xff\xff\xff\x01",  # a remaining length of 5 bytes
            b"\x20\x02\x00\x00",  # a CONNACK from a client
            b"\x82\x00",  # no CONNECT first
        ]
        for packet in bad:
            raw = await RawClient.open(port)
            await raw.send(packet)
            assert await raw.closed(5)
        after_connect = [
            b"\x80\x05\x00\x01\x00\x00\x01",  # SUBSCRIBE with wrong fixed-header flags
            b"\x82\x06\x00\x01\x00\x01a\x03",  # SUBSCRIBE asking QoS 3
            b"\x36\x05\x00\x01a\x00\x01",  # PUBLISH with QoS 3
            b"\x30\x03\x00\x01#",  # PUBLISH to a wildcard topic
            b"\x10" + connect_packet("b", mqtt.credential)[1:],  # a second CONNECT
        ]
        for packet in after_connect:
            raw = await RawClient.open(port)
            await raw.send(connect_packet(unique("raw"), mqtt.credential))
            assert await raw.read(4) == b"\x20\x02\x00\x00"
            await raw.send(packet)
            assert await raw.closed(5)
        await bystander.publish(f"{stream}/still", b"here", qos=1)
        got = await receive(bystander, 1)
        assert got[0].payload == b"here"


async def test_keep_alive_closes_a_silent_client(mqtt: MqttCluster) -> None:
    raw = await RawClient.open(mqtt.ports["gateway"])
    await raw.send(connect_packet(unique("quiet"), mqtt.credential, keep_alive=1))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    await raw.send(b"\xc0\x00")  # PINGREQ
    assert await raw.read(2) == b"\xd0\x00"
    started = time.monotonic()
    assert await raw.closed(10)
    assert 1.0 <= time.monotonic() - started < 5


async def test_a_second_connection_of_a_client_id_takes_over(mqtt: MqttCluster) -> None:
    client_id = unique("twice")
    raw = await RawClient.open(mqtt.ports["gateway"])
    await raw.send(connect_packet(client_id, mqtt.credential))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    async with client(mqtt, "gateway-2", identifier=client_id):
        assert await raw.closed(10)


async def test_a_client_that_does_not_read_slows_no_one(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt, partitions=1)
    stuck = await RawClient.open(mqtt.ports["gateway"])
    await stuck.send(connect_packet(unique("stuck"), mqtt.credential))
    assert await stuck.read(4) == b"\x20\x02\x00\x00"
    topic = f"{stream}/t".encode()
    await stuck.send(
        b"\x82"
        + bytes([len(topic) + 5])
        + b"\x00\x01"
        + len(topic).to_bytes(2, "big")
        + topic
        + b"\x01"
    )
    payload = b"x" * 60_000
    async with client(mqtt) as publisher, client(mqtt) as other:
        await other.subscribe(f"{stream}/#", qos=1)
        for _ in range(60):  # 3.6 MB the stuck client never reads
            await publisher.publish(f"{stream}/t", payload, qos=1)
        started = time.monotonic()
        await publisher.publish(f"{stream}/last", b"fast", qos=1)
        got = await receive(other, 61, timeout_s=30)
        assert got[-1].payload == b"fast"
        assert time.monotonic() - started < 10
    stuck.close()


@needs(
    None
    if shutil.which("mosquitto_pub")
    else "mosquitto_pub missing (Debian package mosquitto-clients; .ci/run installs it)"
)
async def test_mosquitto_pub_and_sub(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    port = str(mqtt.ports["gateway"])
    auth = ["-u", "app", "-P", mqtt.credential, "-p", port, "-h", "127.0.0.1"]
    sub = subprocess.Popen(  # noqa: ASYNC220 (it runs beside the test, read at the end)
        ["mosquitto_sub", *auth, "-t", f"{stream}/#", "-q", "1", "-C", "2", "-v", "-W", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def published() -> bool:
            subprocess.run(
                ["mosquitto_pub", *auth, "-t", f"{stream}/hello", "-m", "world", "-q", "1"],
                check=True,
                timeout=30,
            )
            return sub.poll() is not None

        await eventually(lambda: asyncio.to_thread(published), 30, "mosquitto_sub's messages")
        out, _ = sub.communicate(timeout=30)
    finally:
        sub.kill()
    assert f"{stream}/hello world" in out.splitlines()


async def test_a_tls_client_on_the_plaintext_port_fails_at_once(mqtt: MqttCluster) -> None:
    context = ssl.create_default_context()
    started = time.monotonic()
    with pytest.raises(ssl.SSLError):
        await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", mqtt.ports["gateway"], ssl=context), 10
        )
    assert time.monotonic() - started < 2


async def test_qos2_publish_is_stored_once_and_completes(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt, partitions=1)
    async with client(mqtt) as subscriber:
        await subscriber.subscribe(f"{stream}/#", qos=1)
        raw = await RawClient.open(mqtt.ports["gateway"])
        await raw.send(connect_packet(unique("q2"), mqtt.credential))
        assert await raw.read(4) == b"\x20\x02\x00\x00"
        packet = publish_packet(f"{stream}/t", b"exactly", packet_id=5)
        qos2 = bytes([0x34]) + packet[1:]
        await raw.send(qos2)
        assert await raw.read(4) == b"\x50\x02\x00\x05"  # PUBREC
        await raw.send(bytes([0x3C]) + packet[1:])  # the same again, DUP, before PUBREL
        assert await raw.read(4) == b"\x50\x02\x00\x05"
        await raw.send(b"\x62\x02\x00\x05")  # PUBREL
        assert await raw.read(4) == b"\x70\x02\x00\x05"  # PUBCOMP
        raw.close()
        got = await receive(subscriber, 1)
        assert got[0].payload == b"exactly"
        await nothing_more(subscriber)


async def test_unsubscribe_stops_delivery(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as subscriber, client(mqtt) as publisher:
        await subscriber.subscribe(f"{stream}/a", qos=1)
        await subscriber.subscribe(f"{stream}/b", qos=1)
        await subscriber.unsubscribe(f"{stream}/a")
        await publisher.publish(f"{stream}/a", b"a", qos=1)
        await publisher.publish(f"{stream}/b", b"b", qos=1)
        got = await receive(subscriber, 1)
        assert got[0].topic.value == f"{stream}/b"
        await nothing_more(subscriber)


async def test_qos1_deliveries_stop_at_the_inflight_limit_until_acked(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt, partitions=1)
    raw = await RawClient.open(mqtt.ports["gateway"])
    await raw.send(connect_packet(unique("limit"), mqtt.credential))
    assert await raw.read(4) == b"\x20\x02\x00\x00"
    assert await raw.subscribe(f"{stream}/t", 1) == b"\x90\x03\x00\x01\x01"
    async with client(mqtt) as publisher:
        for index in range(INFLIGHT + 5):
            await publisher.publish(f"{stream}/t", str(index).encode(), qos=1)
    ids = [(await raw.next_publish())[1] for _ in range(INFLIGHT)]
    with pytest.raises(TimeoutError):  # none past the limit while nothing is acked
        await raw.next_publish_within(1.0)
    await raw.send(b"\x40\x02" + ids[0].to_bytes(2, "big"))  # one PUBACK: one more
    _, _, payload = await raw.next_publish()
    assert payload == str(INFLIGHT).encode()
    raw.close()


async def test_qos0_publishes_before_a_disconnect_are_all_stored(mqtt: MqttCluster) -> None:
    stream = await persistent_stream(mqtt)
    async with client(mqtt) as subscriber:
        await subscriber.subscribe(f"{stream}/#", qos=1)
        raw = await RawClient.open(mqtt.ports["gateway"])
        await raw.send(connect_packet(unique("burst"), mqtt.credential))
        assert await raw.read(4) == b"\x20\x02\x00\x00"
        burst = b"".join(publish_packet(f"{stream}/t", str(i).encode()) for i in range(200))
        retained = bytes([0x31]) + publish_packet(f"{stream}/r", b"kept")[1:]
        await raw.send(burst + retained + b"\xe0\x00")  # ... and DISCONNECT at once
        assert await raw.closed()
        got = await receive(subscriber, 201)
        assert sorted(m.payload for m in got if m.topic.value.endswith("/t")) == sorted(
            str(i).encode() for i in range(200)
        )
    async with client(mqtt) as later:
        await later.subscribe(f"{stream}/r", qos=1)
        assert (await receive(later, 1))[0].payload == b"kept"


async def test_a_persistent_session_is_its_identitys_alone(mqtt: MqttCluster) -> None:
    identity = unique("other")
    async with await tamto_sdk.connect(mqtt.url, api_key=mqtt.credential) as admin:
        await admin.security.create_identity(identity)
        key = (await admin.security.create_api_key(identity)).api_key
    client_id = unique("owned")
    async with client(mqtt, identifier=client_id, clean_session=False):
        pass
    raw = await RawClient.open(mqtt.ports["gateway-2"])
    await raw.send(connect_packet(client_id, key, clean=False))
    assert await raw.read(4) == b"\x20\x02\x00\x05"  # not authorized
    assert await raw.closed()


#: The README's mosquitto walkthrough (tests/doc_blocks.py finds it).
README_MQTT = (
    "README.md: tamto up      # in another terminal; it prints each gateway's MQTT address"
)


def readme_mosquitto_lines(mqtt: MqttCluster) -> tuple[list[list[str]], list[str]]:
    """The walkthrough's commands as argv lists (its `tamto up` is the module's cluster,
    `${A[@]}` expanded with the cluster's port and key), and the output lines it shows."""
    block = next(b for b in code_blocks() if b.key == README_MQTT)
    commands: list[list[str]] = []
    shown: list[str] = []
    common: list[str] = []
    for line in block.text.splitlines()[1:]:
        if line.startswith("# "):
            shown.append(line[2:])
            continue
        line = re.split(r"\s+# ", line)[0].strip().removesuffix("&").strip()
        line = line.replace("<its MQTT port>", str(mqtt.ports["gateway"]))
        line = line.replace("<the development API key>", mqtt.credential)
        if line.startswith("A=("):
            common = shlex.split(line[3:-1])
            continue
        argv = shlex.split(line)
        commands.append([w for word in argv for w in (common if word == "${A[@]}" else [word])])
    return commands, shown


@needs(
    None
    if shutil.which("mosquitto_pub")
    else "mosquitto_pub missing (Debian package mosquitto-clients; .ci/run installs it)"
)
async def test_the_readme_mosquitto_walkthrough_runs(mqtt: MqttCluster) -> None:
    (ensure, sub, pub, retain), shown = readme_mosquitto_lines(mqtt)
    env = {**os.environ, "TAMTO_URL": mqtt.url, "TAMTO_API_KEY": mqtt.credential}
    ensure[0] = str(Path(sys.executable).with_name("tamto"))
    await asyncio.to_thread(subprocess.run, ensure, check=True, timeout=60, env=env)
    # The README's subscriber runs in the background until stopped: here until its first
    # message, published again until it came (a publish before it subscribed is not kept).
    got = subprocess.Popen(  # noqa: ASYNC220 (it runs beside the test, read at the end)
        [*sub, "-C", "1", "-W", "30"], stdout=subprocess.PIPE, text=True
    )
    try:

        def published() -> bool:
            subprocess.run(pub, check=True, timeout=30)
            return got.poll() is not None

        await eventually(lambda: asyncio.to_thread(published), 30, "mosquitto_sub's message")
        out, _ = got.communicate(timeout=30)
    finally:
        got.kill()
    assert out.splitlines() == shown
    await asyncio.to_thread(subprocess.run, retain, check=True, timeout=30)
    topic = retain[retain.index("-t") + 1]
    later = [*sub[: sub.index("-t")], "-t", topic, "-v", "-C", "1", "-W", "30"]
    late = await asyncio.to_thread(
        subprocess.run, later, capture_output=True, text=True, timeout=60, check=True
    )
    assert late.stdout.splitlines() == ["sensors/k1/state on"], "retained for a later subscriber"
