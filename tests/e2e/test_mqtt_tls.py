"""MQTT on a TLS system: served with the gateway's certificate (aiomqtt, mosquitto),
and a plaintext client on the TLS port is refused at once with a CONNACK."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import Awaitable, Iterator

import aiomqtt
import pytest

import tamto_sdk
from tamto_sdk import ClientOptions
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.needs import needs
from tests.e2e.mqtt_clients import MqttCluster, RawClient, connect_packet, start_mqtt, unique

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tls_mqtt(tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttCluster]:
    cluster = TestCluster(tmp_path_factory.mktemp("mqtt-tls"), tamto_infra, tls=True)
    try:
        yield start_mqtt(cluster)
    finally:
        cluster.stop_all()


def sdk_of(tls_mqtt: MqttCluster) -> Awaitable[tamto_sdk.Client]:
    options = ClientOptions(root_certificates=tls_mqtt.cluster.ca_file.read_bytes())
    return tamto_sdk.connect(tls_mqtt.url, api_key=tls_mqtt.credential, options=options)


async def test_mqtt_over_tls_with_the_cluster_ca(tls_mqtt: MqttCluster) -> None:
    stream = unique("tls")
    async with await sdk_of(tls_mqtt) as sdk:
        await sdk.streams.ensure(stream)
    context = ssl.create_default_context(cafile=str(tls_mqtt.cluster.ca_file))
    port = tls_mqtt.ports["gateway"]
    kwargs = {"username": "app", "password": tls_mqtt.credential, "tls_context": context}
    async with (
        aiomqtt.Client("127.0.0.1", port, **kwargs) as subscriber,  # type: ignore[arg-type]
        aiomqtt.Client("127.0.0.1", port, **kwargs) as publisher,  # type: ignore[arg-type]
    ):
        await subscriber.subscribe(f"{stream}/#", qos=1)
        await publisher.publish(f"{stream}/secure", b"yes", qos=1)
        async with asyncio.timeout(20):
            message = await anext(aiter(subscriber.messages))
        assert (message.topic.value, message.payload) == (f"{stream}/secure", b"yes")


async def test_plaintext_on_the_tls_port_is_refused_at_once(tls_mqtt: MqttCluster) -> None:
    raw = await RawClient.open(tls_mqtt.ports["gateway"])
    started = time.monotonic()
    await raw.send(connect_packet(unique("plain"), tls_mqtt.credential))
    assert await raw.read(4) == b"\x20\x02\x00\x03"  # CONNACK: server unavailable
    assert await raw.closed(2)
    assert time.monotonic() - started < 2


@needs(
    None
    if shutil.which("mosquitto_pub")
    else "mosquitto_pub missing (Debian package mosquitto-clients; .ci/run installs it)"
)
def test_mosquitto_over_tls_and_over_plaintext(tls_mqtt: MqttCluster) -> None:
    stream = unique("tls")

    async def ensure() -> None:
        async with await sdk_of(tls_mqtt) as sdk:
            await sdk.streams.ensure(stream)

    asyncio.run(ensure())
    common = ["-h", "127.0.0.1", "-p", str(tls_mqtt.ports["gateway"]), "-u", "app"]
    common += ["-P", tls_mqtt.credential, "-t", f"{stream}/x", "-m", "m", "-q", "1"]
    secure = subprocess.run(
        ["mosquitto_pub", *common, "--cafile", str(tls_mqtt.cluster.ca_file)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert secure.returncode == 0, secure.stderr
    started = time.monotonic()
    plain = subprocess.run(["mosquitto_pub", *common], capture_output=True, text=True, timeout=30)
    assert plain.returncode != 0
    assert "unavailable" in plain.stderr.lower()
    assert time.monotonic() - started < 5
