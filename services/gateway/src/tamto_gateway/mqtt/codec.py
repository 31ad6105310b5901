"""MQTT 3.1.1 packets: read from a byte stream and written, checked as OASIS says.

Written here rather than taken from a library: the maintained Python brokers'
codecs come with a whole broker (amqtt pins an exact `websockets` that the
gateway's HTTP API cannot share, and brings a CLI, a state machine and password
hashing); the standalone codecs are unmaintained (mqtt-codec, hbmqtt), and the
clients' (paho, gmqtt) only parse what a server sends. MQTT 3.1.1's packets are
few and small, and reading them strictly is the broker's first defence: every
violation is a `MalformedPacket`, after which the connection is closed (MQTT-4.8.0-1).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT = range(8, 15)

#: CONNACK return codes (MQTT 3.1.1, 3.2.2.3).
ACCEPTED = 0
UNACCEPTABLE_PROTOCOL = 1
IDENTIFIER_REJECTED = 2
SERVER_UNAVAILABLE = 3
BAD_CREDENTIALS = 4
NOT_AUTHORIZED = 5
#: A SUBACK's return code for a refused topic filter.
SUBSCRIPTION_FAILED = 0x80

#: Protocol levels understood: 3 (MQTT 3.1, "MQIsdp") and 4 (MQTT 3.1.1, "MQTT").
PROTOCOLS = {3: "MQIsdp", 4: "MQTT"}
#: The flags the fixed header must carry, by packet type (PUBLISH's vary).
_FIXED_FLAGS = {PUBREL: 0b0010, SUBSCRIBE: 0b0010, UNSUBSCRIBE: 0b0010}


class MalformedPacket(Exception):
    """The client broke the protocol: the connection is closed without an answer."""


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int
    retain: bool


@dataclass(frozen=True, slots=True)
class Connect:
    protocol_level: int
    client_id: str
    clean_session: bool
    keep_alive_s: int
    username: str | None
    password: bytes | None
    will: Will | None


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    filters: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    filters: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Ack:
    """PUBACK, PUBREC, PUBREL or PUBCOMP: a packet id."""

    kind: int
    packet_id: int


@dataclass(frozen=True, slots=True)
class Bare:
    """PINGREQ or DISCONNECT: no content."""

    kind: int


Packet = Connect | Publish | Subscribe | Unsubscribe | Ack | Bare


class ConnectRefused(Exception):
    """A CONNECT well formed but refused with a CONNACK return code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


async def read_packet(reader: asyncio.StreamReader, max_bytes: int) -> Packet:
    """The next packet; `MalformedPacket` for a violation or one over `max_bytes`,
    `asyncio.IncompleteReadError` when the stream ends."""
    first = (await reader.readexactly(1))[0]
    length = await _remaining_length(reader)
    if length > max_bytes:
        raise MalformedPacket(f"a packet of {length} bytes exceeds the limit of {max_bytes}")
    body = await reader.readexactly(length)
    return parse(first >> 4, first & 0x0F, body)


async def _remaining_length(reader: asyncio.StreamReader) -> int:
    value = 0
    for shift in range(0, 28, 7):
        byte = (await reader.readexactly(1))[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
    raise MalformedPacket("the remaining length takes more than 4 bytes")


def parse(kind: int, flags: int, body: bytes) -> Packet:
    """The packet of type `kind` with fixed-header `flags` and `body`."""
    if kind != PUBLISH and flags != _FIXED_FLAGS.get(kind, 0):
        raise MalformedPacket(f"packet type {kind} with reserved flags {flags:#06b}")
    cursor = _Cursor(body)
    packet: Packet
    if kind == CONNECT:
        packet = _connect(cursor)
    elif kind == PUBLISH:
        packet = _publish(cursor, flags)
    elif kind in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        packet = Ack(kind, cursor.packet_id())
    elif kind == SUBSCRIBE:
        packet = _subscribe(cursor)
    elif kind == UNSUBSCRIBE:
        packet = _unsubscribe(cursor)
    elif kind in (PINGREQ, DISCONNECT):
        packet = Bare(kind)
    else:
        raise MalformedPacket(f"packet type {kind} is not sent by clients")
    if kind != PUBLISH and not cursor.at_end():
        raise MalformedPacket(f"packet type {kind} has {cursor.left()} bytes too many")
    return packet


def _connect(cursor: _Cursor) -> Connect:
    name = cursor.text()
    level = cursor.byte()
    if name not in PROTOCOLS.values():
        raise MalformedPacket(f"protocol name {name!r} is not MQTT")
    if PROTOCOLS.get(level) != name:
        raise ConnectRefused(UNACCEPTABLE_PROTOCOL, f"protocol level {level} is not supported")
    flags = cursor.byte()
    if flags & 0x01:
        raise MalformedPacket("the CONNECT flags' reserved bit is set")
    keep_alive = cursor.u16()
    client_id = cursor.text()
    will_qos = (flags >> 3) & 0x03
    will = None
    if flags & 0x04:
        if will_qos == 3:
            raise MalformedPacket("will QoS 3")
        topic = cursor.text()
        will = Will(topic, cursor.binary(), will_qos, bool(flags & 0x20))
    elif flags & 0x38:
        raise MalformedPacket("will QoS or retain set without a will")
    username = cursor.text() if flags & 0x80 else None
    if flags & 0x40 and username is None:
        raise MalformedPacket("a password without a user name")
    password = cursor.binary() if flags & 0x40 else None
    return Connect(level, client_id, bool(flags & 0x02), keep_alive, username, password, will)


def _publish(cursor: _Cursor, flags: int) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")
    dup = bool(flags & 0x08)
    if dup and qos == 0:
        raise MalformedPacket("PUBLISH with DUP set at QoS 0")
    topic = cursor.text()
    if not topic or "+" in topic or "#" in topic:
        raise MalformedPacket(f"PUBLISH topic {topic!r} is empty or has a wildcard")
    packet_id = cursor.packet_id() if qos else None
    return Publish(topic, cursor.rest(), qos, bool(flags & 0x01), dup, packet_id)


def _subscribe(cursor: _Cursor) -> Subscribe:
    packet = Subscribe(cursor.packet_id())
    while not cursor.at_end():
        topic_filter = cursor.text()
        qos = cursor.byte()
        if qos > 2:
            raise MalformedPacket(f"SUBSCRIBE requests QoS {qos} (reserved bits or QoS 3)")
        packet.filters.append((topic_filter, qos))
    if not packet.filters:
        raise MalformedPacket("SUBSCRIBE without a topic filter")
    return packet


def _unsubscribe(cursor: _Cursor) -> Unsubscribe:
    packet = Unsubscribe(cursor.packet_id())
    while not cursor.at_end():
        packet.filters.append(cursor.text())
    if not packet.filters:
        raise MalformedPacket("UNSUBSCRIBE without a topic filter")
    return packet


class _Cursor:
    """Reads a packet's body, every overrun a `MalformedPacket`."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def take(self, count: int) -> bytes:
        if self._at + count > len(self._data):
            raise MalformedPacket("the packet ends early")
        chunk = self._data[self._at : self._at + count]
        self._at += count
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self.take(2), "big")

    def packet_id(self) -> int:
        value = self.u16()
        if value == 0:
            raise MalformedPacket("packet identifier 0")
        return value

    def binary(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        raw = self.binary()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPacket("a string is not well-formed UTF-8") from None
        if "\x00" in value:
            raise MalformedPacket("a string holds U+0000")
        return value

    def rest(self) -> bytes:
        chunk = self._data[self._at :]
        self._at = len(self._data)
        return chunk

    def at_end(self) -> bool:
        return self._at == len(self._data)

    def left(self) -> int:
        return len(self._data) - self._at


def _frame(first: int, body: bytes) -> bytes:
    length = len(body)
    encoded = bytearray()
    while True:
        byte = length & 0x7F
        length >>= 7
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            return bytes([first, *encoded]) + body


def _text(value: str) -> bytes:
    raw = value.encode()
    return len(raw).to_bytes(2, "big") + raw


def connack(session_present: bool, code: int) -> bytes:
    return _frame(CONNACK << 4, bytes([int(session_present), code]))


def publish(packet: Publish) -> bytes:
    flags = (packet.dup << 3) | (packet.qos << 1) | int(packet.retain)
    pid = b"" if packet.packet_id is None else packet.packet_id.to_bytes(2, "big")
    return _frame((PUBLISH << 4) | flags, _text(packet.topic) + pid + packet.payload)


def ack(kind: int, packet_id: int) -> bytes:
    """PUBACK, PUBREC, PUBREL, PUBCOMP or UNSUBACK for `packet_id`."""
    return _frame((kind << 4) | _FIXED_FLAGS.get(kind, 0), packet_id.to_bytes(2, "big"))


def suback(packet_id: int, codes: list[int]) -> bytes:
    return _frame(SUBACK << 4, packet_id.to_bytes(2, "big") + bytes(codes))


PINGRESP_BYTES = _frame(PINGRESP << 4, b"")
