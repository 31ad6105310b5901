"""The MQTT 3.1.1 codec: well-formed packets read back, each violation refused."""

from __future__ import annotations

import asyncio

import pytest

from tamto_gateway.mqtt import codec


async def read(data: bytes, max_bytes: int = 1024) -> codec.Packet:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return await codec.read_packet(reader, max_bytes)


def text(value: str) -> bytes:
    return len(value.encode()).to_bytes(2, "big") + value.encode()


def connect(flags: int, payload: bytes, level: int = 4, name: str = "MQTT") -> bytes:
    body = text(name) + bytes([level, flags]) + (30).to_bytes(2, "big") + payload
    return bytes([0x10, len(body)]) + body


async def test_connect_with_will_and_credentials() -> None:
    payload = text("dev") + text("s/w") + text("bye") + text("u") + text("key")
    packet = await read(connect(0x02 | 0x04 | 0x08 | 0x20 | 0xC0, payload))
    assert packet == codec.Connect(
        4, "dev", True, 30, "u", b"key", codec.Will("s/w", b"bye", 1, True)
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (connect(0x03, text("a")), "reserved bit"),
        (connect(0x10, text("a")), "without a will"),
        (connect(0x40, text("a") + text("p")), "password without a user name"),
        (connect(0x04 | 0x18, text("a") + text("t") + text("m")), "will QoS 3"),
        (connect(0x02, text("a"), name="MQTX"), "not MQTT"),
        (b"\x30\x03\x00\x01#", "wildcard"),
        (b"\x36\x04\x00\x01a\x00", "QoS 3"),
        (b"\x38\x03\x00\x01a", "DUP set at QoS 0"),
        (b"\x32\x05\x00\x01a\x00\x00", "identifier 0"),
        (b"\x82\x02\x00\x01", "without a topic filter"),
        (b"\x82\x06\x00\x01\x00\x01a\x04", "QoS 4"),
        (b"\x80\x06\x00\x01\x00\x01a\x01", "reserved flags"),
        (b"\xa2\x02\x00\x01", "UNSUBSCRIBE without"),
        (b"\x20\x02\x00\x00", "not sent by clients"),
        (b"\xc0\x01\x00", "too many"),
        (b"\x30\x04\x00\x02\xc3\x28", "UTF-8"),
        (b"\x30\x04\x00\x02a\x00", r"U\+0000"),
        (b"\x30\xff\xff\xff\xff\x01", "more than 4 bytes"),
        (b"\x30\x81\x08" + b"\x00" * 10, "exceeds the limit"),
    ],
)
async def test_violations_are_malformed(data: bytes, reason: str) -> None:
    with pytest.raises(codec.MalformedPacket, match=reason):
        await read(data)


async def test_mqtt5_is_refused_with_connack_1() -> None:
    with pytest.raises(codec.ConnectRefused) as refused:
        await read(connect(0x02, text("a"), level=5))
    assert refused.value.code == codec.UNACCEPTABLE_PROTOCOL


async def test_mqtt31_is_understood() -> None:
    packet = await read(connect(0x02, text("a"), level=3, name="MQIsdp"))
    assert isinstance(packet, codec.Connect)
    assert packet.protocol_level == 3


async def test_publish_round_trip_with_a_long_payload() -> None:
    sent = codec.Publish("s/t", b"x" * 300, qos=1, retain=True, dup=True, packet_id=9)
    assert await read(codec.publish(sent)) == sent


async def test_subscribe_and_unsubscribe() -> None:
    body = b"\x00\x07" + text("a/+") + b"\x01" + text("b/#") + b"\x00"
    assert await read(bytes([0x82, len(body)]) + body) == codec.Subscribe(
        7, [("a/+", 1), ("b/#", 0)]
    )
    body = b"\x00\x08" + text("a/+")
    assert await read(bytes([0xA2, len(body)]) + body) == codec.Unsubscribe(8, ["a/+"])


def test_server_packets() -> None:
    assert codec.connack(True, 0) == b"\x20\x02\x01\x00"
    assert codec.suback(3, [1, 0x80]) == b"\x90\x04\x00\x03\x01\x80"
    assert codec.ack(codec.PUBACK, 258) == b"\x40\x02\x01\x02"
    assert codec.PINGRESP_BYTES == b"\xd0\x00"
