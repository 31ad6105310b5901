from tamto_protocol.v1 import messages_pb2 as _messages_pb2
from tamto_protocol.v1 import gateway_pb2 as _gateway_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RouterAppendRequest(_message.Message):
    __slots__ = ("stream", "partition", "batch", "order", "call_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    batch: _messages_pb2.RecordBatch
    order: _messages_pb2.ProducerOrder
    call_id: int
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., order: _Optional[_Union[_messages_pb2.ProducerOrder, _Mapping]] = ..., call_id: _Optional[int] = ...) -> None: ...

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

class RouterPartitionRequest(_message.Message):
    __slots__ = ("stream", "partition")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class RouterListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscriptions: _Optional[_Iterable[str]] = ...) -> None: ...

class RouterSubscriptionRequest(_message.Message):
    __slots__ = ("stream", "partition", "subscription")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    subscription: str
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., subscription: _Optional[str] = ...) -> None: ...

class RouterSeekRequest(_message.Message):
    __slots__ = ("stream", "partition", "subscription", "target", "dry_run")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    subscription: str
    target: _messages_pb2.SeekTarget
    dry_run: bool
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., subscription: _Optional[str] = ..., target: _Optional[_Union[_messages_pb2.SeekTarget, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RouterDeleteSubscriptionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class RouterReadRequest(_message.Message):
    __slots__ = ("stream", "partition", "from_offset", "max_messages", "subscription")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    from_offset: int
    max_messages: int
    subscription: str
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., from_offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., subscription: _Optional[str] = ...) -> None: ...

class RouterReadResponse(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StoredBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[_messages_pb2.StoredBatch, _Mapping]]] = ...) -> None: ...

class ConsumeMuxRequests(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ConsumeMuxRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[ConsumeMuxRequest, _Mapping]]] = ...) -> None: ...

class ConsumeMuxResponses(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[ConsumeMuxResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[ConsumeMuxResponse, _Mapping]]] = ...) -> None: ...

class ConsumeMuxRequest(_message.Message):
    __slots__ = ("session", "consume", "end", "cancel")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    session: int
    consume: _messages_pb2.ConsumeRequest
    end: bool
    cancel: bool
    def __init__(self, session: _Optional[int] = ..., consume: _Optional[_Union[_messages_pb2.ConsumeRequest, _Mapping]] = ..., end: _Optional[bool] = ..., cancel: _Optional[bool] = ...) -> None: ...

class ConsumeMuxResponse(_message.Message):
    __slots__ = ("session", "consume", "end")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    session: int
    consume: bytes
    end: _messages_pb2.CallStatus
    def __init__(self, session: _Optional[int] = ..., consume: _Optional[bytes] = ..., end: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ...) -> None: ...
