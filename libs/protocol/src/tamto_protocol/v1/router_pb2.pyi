from tamto_protocol.v1 import messages_pb2 as _messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RouterAppendRequest(_message.Message):
    __slots__ = ("stream", "partition", "batch", "call_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    batch: _messages_pb2.RecordBatch
    call_id: int
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., call_id: _Optional[int] = ...) -> None: ...

class RouterAppendStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: RouterAppendResponse
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[RouterAppendResponse, _Mapping]] = ...) -> None: ...

class RouterAppendResponse(_message.Message):
    __slots__ = ("base_offset", "count", "offsets")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    count: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, base_offset: _Optional[int] = ..., count: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...
