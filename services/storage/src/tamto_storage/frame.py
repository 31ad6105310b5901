"""The frame that wraps one stored batch in a WAL file.

Layout (little-endian, no padding), a 36-byte header then the body::

    offset size  field
    0      4     body_length      u32  bytes of Arrow IPC that follow the header
    4      4     crc32            u32  zlib.crc32 over header bytes 8..36 + body
    8      8     base_offset      i64  offset of the batch's first message
    16     4     count            u32  messages in the batch (>= 1)
    20     8     publish_time_us  i64  microseconds since the Unix epoch, UTC
    28     8     epoch            i64  owner epoch that appended the batch
    36     n     body                  the producer's Arrow IPC stream, unchanged

The CRC covers every header field after itself, so a flipped bit in the
offsets is caught like one in the payload. It is zlib's CRC-32, computed with
ISA-L (`isal`), which gives the same value ~20x faster (58 vs 2.8 GB/s on the
build machine): at zlib's speed the CRC of each appended batch was the largest
single cost on storage's event loop.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from isal.isal_zlib import crc32

HEADER = struct.Struct("<IIqIqq")
HEADER_SIZE = HEADER.size
_COVERED = struct.Struct("<qIqq")  # the header fields the CRC covers
MAX_BODY_BYTES = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """A decoded frame header."""

    body_length: int
    crc: int
    base_offset: int
    count: int
    publish_time_us: int
    epoch: int

    @property
    def frame_length(self) -> int:
        return HEADER_SIZE + self.body_length


def encode_header(
    *, base_offset: int, count: int, publish_time_us: int, epoch: int, body: bytes | memoryview
) -> bytes:
    """The header for `body`; write it immediately before the body."""
    covered = _COVERED.pack(base_offset, count, publish_time_us, epoch)
    crc = crc32(body, crc32(covered))
    return struct.pack("<II", len(body), crc) + covered


def decode_header(data: bytes | memoryview) -> FrameHeader:
    """Decode the first HEADER_SIZE bytes of `data` (no checksum check: see `crc_matches`)."""
    return FrameHeader(*HEADER.unpack_from(data))


def crc_matches(header_bytes: bytes | memoryview, body: bytes | memoryview) -> bool:
    """Whether the CRC in `header_bytes` matches the header fields and `body`."""
    expected = HEADER.unpack_from(header_bytes)[1]
    crc = crc32(body, crc32(header_bytes[8:HEADER_SIZE]))
    return bool(crc == expected)
