"""How many bytes an Arrow IPC stream's compressed buffers unpack to, read before unpacking.

An IPC record batch may carry its buffers compressed (LZ4 frame or ZSTD). Arrow's
reader allocates and fills every buffer at its unpacked size as it reads the
batch, before anything could check it: a 20 KB batch of zeros unpacked to 600 MB
in each of gateway, router and storage. Each compressed buffer starts with its
unpacked length (8 bytes, little-endian; -1: stored as is), and the batch's
metadata (a flatbuffer) says where the buffers are, so the total is known from a
few reads of the metadata and 8 bytes per buffer. `check_unpacked_size` reads
them and refuses a stream whose buffers would unpack past a limit, before Arrow
is asked to read it. Uncompressed buffers are already in memory: they cost
nothing more than their bytes.

Only the fields this needs are read from the flatbuffer (Arrow's
``format/Message.fbs``): ``Message.header_type``/``header``, ``RecordBatch.buffers``
and ``compression``, ``DictionaryBatch.data``. Every read is bounds-checked;
metadata that cannot be read this way is refused.
"""

from __future__ import annotations

import struct

import pyarrow as pa

#: ``MessageHeader`` union members that carry buffers.
_DICTIONARY_BATCH = 2
_RECORD_BATCH = 3
#: Field indexes (flatbuffer vtable slots).
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER = 1, 2
_RECORD_BATCH_BUFFERS, _RECORD_BATCH_COMPRESSION = 2, 3
_DICTIONARY_BATCH_DATA = 1
#: ``struct Buffer { offset: long; length: long; }``
_BUFFER = struct.Struct("<qq")
#: An unpacked length of -1: the buffer is stored uncompressed after its prefix.
_STORED = -1


class UnpackedSizeError(ValueError):
    """A stream's buffers would unpack past the limit, or its metadata cannot be read."""


class _Table:
    """One flatbuffer table, its fields read with bounds checks."""

    def __init__(self, data: memoryview, position: int) -> None:
        self._data = data
        self._position = position
        vtable = position - _read(data, "<i", position)
        self._vtable = vtable
        self._vtable_size = _read(data, "<H", vtable)

    def _field(self, index: int) -> int:
        slot = 4 + 2 * index
        if slot + 2 > self._vtable_size:
            return 0
        offset = _read(self._data, "<H", self._vtable + slot)
        return self._position + offset if offset else 0

    def uint8(self, index: int) -> int:
        at = self._field(index)
        return _read(self._data, "<B", at) if at else 0

    def _target(self, index: int) -> int:
        at = self._field(index)
        return at + _read(self._data, "<I", at) if at else 0

    def table(self, index: int) -> _Table | None:
        at = self._target(index)
        return _Table(self._data, at) if at else None

    def has(self, index: int) -> bool:
        return bool(self._field(index))

    def structs(self, index: int, layout: struct.Struct) -> list[tuple[int, ...]]:
        at = self._target(index)
        if not at:
            return []
        count = _read(self._data, "<I", at)
        if at + 4 + count * layout.size > len(self._data):
            raise UnpackedSizeError("IPC metadata: a vector runs past its message")
        return list(layout.iter_unpack(self._data[at + 4 : at + 4 + count * layout.size]))


def _read(data: memoryview, layout: str, at: int) -> int:
    try:
        if at < 0:
            raise struct.error
        value: int = struct.unpack_from(layout, data, at)[0]
    except struct.error:
        raise UnpackedSizeError("IPC metadata: a field lies outside its message") from None
    return value


def _batch_table(metadata: memoryview) -> _Table | None:
    """The ``RecordBatch`` table of a message's metadata, or None (a schema message)."""
    message = _Table(metadata, _read(metadata, "<I", 0))
    kind = message.uint8(_MESSAGE_HEADER_TYPE)
    if kind not in (_RECORD_BATCH, _DICTIONARY_BATCH):
        return None
    header = message.table(_MESSAGE_HEADER)
    if header is not None and kind == _DICTIONARY_BATCH:
        header = header.table(_DICTIONARY_BATCH_DATA)
    return header


def unpacked_body_bytes(message: pa.ipc.Message) -> int:
    """What the buffers of `message` take once unpacked: its body's size unless its
    buffers are compressed, else the sum of their recorded unpacked lengths."""
    body = message.body
    body_size = 0 if body is None else body.size
    batch = _batch_table(memoryview(message.metadata))
    if batch is None or not batch.has(_RECORD_BATCH_COMPRESSION) or body is None:
        return body_size
    view = memoryview(body)
    total = 0
    for offset, length in batch.structs(_RECORD_BATCH_BUFFERS, _BUFFER):
        if length < 8:  # empty: nothing to unpack (shorter ones Arrow refuses itself)
            continue
        if offset < 0 or offset + 8 > len(view):
            raise UnpackedSizeError("IPC metadata: a buffer lies outside the message body")
        unpacked = int.from_bytes(view[offset : offset + 8], "little", signed=True)
        if unpacked == _STORED:
            unpacked = length - 8
        elif unpacked < 0:
            raise UnpackedSizeError(f"a compressed buffer records an unpacked size of {unpacked}")
        total += unpacked
    return total


def check_unpacked_size(data: bytes | memoryview, limit: int) -> None:
    """Refuse (`UnpackedSizeError`) an IPC stream whose record batches' buffers would
    take more than `limit` bytes in all once unpacked; nothing is unpacked to find out.
    A stream Arrow cannot frame is left for the reader to refuse."""
    source = pa.BufferReader(pa.py_buffer(data))
    total = 0
    while True:
        try:
            message = pa.ipc.read_message(source)
        except EOFError:
            return
        except (pa.ArrowException, OSError):
            return  # not an IPC stream: the reader says what is wrong
        total += unpacked_body_bytes(message)
        if total > limit:
            raise UnpackedSizeError(too_large(limit))


def too_large(limit: int) -> str:
    """The refusal of a stream that would unpack past `limit`."""
    return (
        f"its buffers unpack to more than {limit} bytes (the limit on a batch's "
        "unpacked size); refused before unpacking"
    )
