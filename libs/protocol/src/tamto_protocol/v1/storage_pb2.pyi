from tamto_protocol.v1 import messages_pb2 as _messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionRef(_message.Message):
    __slots__ = ("stream", "partition")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class OpenPartitionRequest(_message.Message):
    __slots__ = ("partition", "epoch", "start_at")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    epoch: int
    start_at: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., start_at: _Optional[int] = ...) -> None: ...

class OpenPartitionResponse(_message.Message):
    __slots__ = ("next_offset", "start_offset")
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    next_offset: int
    start_offset: int
    def __init__(self, next_offset: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class FenceLedgerRequest(_message.Message):
    __slots__ = ("partition", "epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    epoch: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class FenceLedgerResponse(_message.Message):
    __slots__ = ("last_offset",)
    LAST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    last_offset: int
    def __init__(self, last_offset: _Optional[int] = ...) -> None: ...

class TruncatePartitionRequest(_message.Message):
    __slots__ = ("partition", "epoch", "next_offset", "drop_sealed")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DROP_SEALED_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    epoch: int
    next_offset: int
    drop_sealed: bool
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., next_offset: _Optional[int] = ..., drop_sealed: _Optional[bool] = ...) -> None: ...

class TruncatePartitionResponse(_message.Message):
    __slots__ = ("next_offset",)
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    next_offset: int
    def __init__(self, next_offset: _Optional[int] = ...) -> None: ...

class StorageAppendRequest(_message.Message):
    __slots__ = ("partition", "epoch", "batches", "call_id")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    epoch: int
    batches: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StoredBatch]
    call_id: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[_messages_pb2.StoredBatch, _Mapping]]] = ..., call_id: _Optional[int] = ...) -> None: ...

class StorageAppendResponse(_message.Message):
    __slots__ = ("next_offset",)
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    next_offset: int
    def __init__(self, next_offset: _Optional[int] = ...) -> None: ...

class StorageAppendStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: StorageAppendResponse
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[StorageAppendResponse, _Mapping]] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("partition", "from_offset", "max_messages")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    from_offset: int
    max_messages: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., from_offset: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("batches", "next_offset")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StoredBatch]
    next_offset: int
    def __init__(self, batches: _Optional[_Iterable[_Union[_messages_pb2.StoredBatch, _Mapping]]] = ..., next_offset: _Optional[int] = ...) -> None: ...

class CommitCursorRequest(_message.Message):
    __slots__ = ("partition", "subscription", "epoch", "ack_floor", "acked_above_floor", "replace", "redeliveries", "dead_lettered")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACK_FLOOR_FIELD_NUMBER: _ClassVar[int]
    ACKED_ABOVE_FLOOR_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    REDELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    subscription: str
    epoch: int
    ack_floor: int
    acked_above_floor: _containers.RepeatedCompositeFieldContainer[_messages_pb2.OffsetRange]
    replace: bool
    redeliveries: int
    dead_lettered: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., subscription: _Optional[str] = ..., epoch: _Optional[int] = ..., ack_floor: _Optional[int] = ..., acked_above_floor: _Optional[_Iterable[_Union[_messages_pb2.OffsetRange, _Mapping]]] = ..., replace: _Optional[bool] = ..., redeliveries: _Optional[int] = ..., dead_lettered: _Optional[int] = ...) -> None: ...

class CommitCursorResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCursorRequest(_message.Message):
    __slots__ = ("partition", "subscription")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    subscription: str
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., subscription: _Optional[str] = ...) -> None: ...

class GetCursorResponse(_message.Message):
    __slots__ = ("exists", "ack_floor", "acked_above_floor", "redeliveries", "dead_lettered")
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    ACK_FLOOR_FIELD_NUMBER: _ClassVar[int]
    ACKED_ABOVE_FLOOR_FIELD_NUMBER: _ClassVar[int]
    REDELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    ack_floor: int
    acked_above_floor: _containers.RepeatedCompositeFieldContainer[_messages_pb2.OffsetRange]
    redeliveries: int
    dead_lettered: int
    def __init__(self, exists: _Optional[bool] = ..., ack_floor: _Optional[int] = ..., acked_above_floor: _Optional[_Iterable[_Union[_messages_pb2.OffsetRange, _Mapping]]] = ..., redeliveries: _Optional[int] = ..., dead_lettered: _Optional[int] = ...) -> None: ...

class OffsetForTimeRequest(_message.Message):
    __slots__ = ("partition", "time_us")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIME_US_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    time_us: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., time_us: _Optional[int] = ...) -> None: ...

class OffsetForTimeResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class ListCursorsRequest(_message.Message):
    __slots__ = ("partition",)
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ...) -> None: ...

class ListCursorsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscriptions: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteCursorRequest(_message.Message):
    __slots__ = ("partition", "subscription", "epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    subscription: str
    epoch: int
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., subscription: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class DeleteCursorResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class PartitionStatsRequest(_message.Message):
    __slots__ = ("partition",)
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ...) -> None: ...

class PartitionStatsResponse(_message.Message):
    __slots__ = ("start_offset", "next_offset", "wal_bytes", "segment_bytes")
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    start_offset: int
    next_offset: int
    wal_bytes: int
    segment_bytes: int
    def __init__(self, start_offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., segment_bytes: _Optional[int] = ...) -> None: ...

class RepairRangeRequest(_message.Message):
    __slots__ = ("partition", "epoch", "first_offset", "batches")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionRef
    epoch: int
    first_offset: int
    batches: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StoredBatch]
    def __init__(self, partition: _Optional[_Union[PartitionRef, _Mapping]] = ..., epoch: _Optional[int] = ..., first_offset: _Optional[int] = ..., batches: _Optional[_Iterable[_Union[_messages_pb2.StoredBatch, _Mapping]]] = ...) -> None: ...

class RepairRangeResponse(_message.Message):
    __slots__ = ("damaged_file", "next_offset")
    DAMAGED_FILE_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    damaged_file: str
    next_offset: int
    def __init__(self, damaged_file: _Optional[str] = ..., next_offset: _Optional[int] = ...) -> None: ...
