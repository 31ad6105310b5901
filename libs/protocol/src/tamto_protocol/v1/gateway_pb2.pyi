from tamto_protocol.v1 import messages_pb2 as _messages_pb2
from tamto_protocol.v1 import auth_pb2 as _auth_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuthenticateRequest(_message.Message):
    __slots__ = ("api_key",)
    API_KEY_FIELD_NUMBER: _ClassVar[int]
    api_key: str
    def __init__(self, api_key: _Optional[str] = ...) -> None: ...

class AuthenticateResponse(_message.Message):
    __slots__ = ("token", "expires_at_unix")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    token: str
    expires_at_unix: int
    def __init__(self, token: _Optional[str] = ..., expires_at_unix: _Optional[int] = ...) -> None: ...

class EnsureStreamRequest(_message.Message):
    __slots__ = ("name", "config", "overwrite")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: _messages_pb2.StreamConfig
    overwrite: bool
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[_messages_pb2.StreamConfig, _Mapping]] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class EnsureStreamResponse(_message.Message):
    __slots__ = ("stream", "created", "differences")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    stream: _messages_pb2.StreamInfo
    created: bool
    differences: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, stream: _Optional[_Union[_messages_pb2.StreamInfo, _Mapping]] = ..., created: _Optional[bool] = ..., differences: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListStreamsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeleteStreamRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteStreamResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListStreamsResponse(_message.Message):
    __slots__ = ("streams",)
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    streams: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StreamInfo]
    def __init__(self, streams: _Optional[_Iterable[_Union[_messages_pb2.StreamInfo, _Mapping]]] = ...) -> None: ...

class PublishRequest(_message.Message):
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

class LookupRequest(_message.Message):
    __slots__ = ("stream",)
    STREAM_FIELD_NUMBER: _ClassVar[int]
    stream: str
    def __init__(self, stream: _Optional[str] = ...) -> None: ...

class PartitionOwner(_message.Message):
    __slots__ = ("partition", "address", "epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    address: str
    epoch: int
    def __init__(self, partition: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionOwner]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionOwner, _Mapping]]] = ...) -> None: ...

class PublishStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: PublishResponse
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[PublishResponse, _Mapping]] = ...) -> None: ...

class PublishResponse(_message.Message):
    __slots__ = ("partition", "base_offset", "count", "offsets")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    base_offset: int
    count: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., count: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("subject", "expires_at_unix", "roles", "grants")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    subject: str
    expires_at_unix: int
    roles: _containers.RepeatedScalarFieldContainer[str]
    grants: _containers.RepeatedCompositeFieldContainer[_auth_pb2.Grant]
    def __init__(self, subject: _Optional[str] = ..., expires_at_unix: _Optional[int] = ..., roles: _Optional[_Iterable[str]] = ..., grants: _Optional[_Iterable[_Union[_auth_pb2.Grant, _Mapping]]] = ...) -> None: ...

class PublishEphemeralRequest(_message.Message):
    __slots__ = ("stream", "topic", "batch", "more_runs", "call_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MORE_RUNS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    topic: str
    batch: _messages_pb2.RecordBatch
    more_runs: _containers.RepeatedCompositeFieldContainer[EphemeralRun]
    call_id: int
    def __init__(self, stream: _Optional[str] = ..., topic: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., more_runs: _Optional[_Iterable[_Union[EphemeralRun, _Mapping]]] = ..., call_id: _Optional[int] = ...) -> None: ...

class EphemeralRun(_message.Message):
    __slots__ = ("topic", "batch")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    topic: str
    batch: _messages_pb2.RecordBatch
    def __init__(self, topic: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ...) -> None: ...

class PublishEphemeralResponse(_message.Message):
    __slots__ = ("count", "matched_entities")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_ENTITIES_FIELD_NUMBER: _ClassVar[int]
    count: int
    matched_entities: int
    def __init__(self, count: _Optional[int] = ..., matched_entities: _Optional[int] = ...) -> None: ...

class PublishEphemeralStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: PublishEphemeralResponse
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[PublishEphemeralResponse, _Mapping]] = ...) -> None: ...

class SubscribeEphemeralRequest(_message.Message):
    __slots__ = ("stream", "match", "group", "consumer_name", "max_deliveries_per_event", "single_messages")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_PER_EVENT_FIELD_NUMBER: _ClassVar[int]
    SINGLE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    stream: str
    match: str
    group: str
    consumer_name: str
    max_deliveries_per_event: int
    single_messages: bool
    def __init__(self, stream: _Optional[str] = ..., match: _Optional[str] = ..., group: _Optional[str] = ..., consumer_name: _Optional[str] = ..., max_deliveries_per_event: _Optional[int] = ..., single_messages: _Optional[bool] = ...) -> None: ...

class EphemeralDelivery(_message.Message):
    __slots__ = ("stream", "topic", "batch", "response_stream", "publish_time_us", "dropped", "message")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_STREAM_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_US_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    stream: str
    topic: str
    batch: _messages_pb2.RecordBatch
    response_stream: str
    publish_time_us: int
    dropped: int
    message: SingleMessage
    def __init__(self, stream: _Optional[str] = ..., topic: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., response_stream: _Optional[str] = ..., publish_time_us: _Optional[int] = ..., dropped: _Optional[int] = ..., message: _Optional[_Union[SingleMessage, _Mapping]] = ...) -> None: ...

class EphemeralSubscribed(_message.Message):
    __slots__ = ("entity",)
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    entity: str
    def __init__(self, entity: _Optional[str] = ...) -> None: ...

class EphemeralEvent(_message.Message):
    __slots__ = ("delivery", "subscribed", "more_deliveries")
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    MORE_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    delivery: EphemeralDelivery
    subscribed: EphemeralSubscribed
    more_deliveries: _containers.RepeatedCompositeFieldContainer[EphemeralDelivery]
    def __init__(self, delivery: _Optional[_Union[EphemeralDelivery, _Mapping]] = ..., subscribed: _Optional[_Union[EphemeralSubscribed, _Mapping]] = ..., more_deliveries: _Optional[_Iterable[_Union[EphemeralDelivery, _Mapping]]] = ...) -> None: ...

class SingleMessage(_message.Message):
    __slots__ = ("payload", "key", "headers")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    key: bytes
    headers: _containers.ScalarMap[str, str]
    def __init__(self, payload: _Optional[bytes] = ..., key: _Optional[bytes] = ..., headers: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RequestRequest(_message.Message):
    __slots__ = ("stream", "topic", "batch", "message", "response_stream", "timeout_ms", "wait_for_responder", "gather", "max_replies", "call_id", "more_calls")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_STREAM_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_RESPONDER_FIELD_NUMBER: _ClassVar[int]
    GATHER_FIELD_NUMBER: _ClassVar[int]
    MAX_REPLIES_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MORE_CALLS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    topic: str
    batch: _messages_pb2.RecordBatch
    message: SingleMessage
    response_stream: str
    timeout_ms: int
    wait_for_responder: bool
    gather: bool
    max_replies: int
    call_id: int
    more_calls: _containers.RepeatedCompositeFieldContainer[RequestRequest]
    def __init__(self, stream: _Optional[str] = ..., topic: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., message: _Optional[_Union[SingleMessage, _Mapping]] = ..., response_stream: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., wait_for_responder: _Optional[bool] = ..., gather: _Optional[bool] = ..., max_replies: _Optional[int] = ..., call_id: _Optional[int] = ..., more_calls: _Optional[_Iterable[_Union[RequestRequest, _Mapping]]] = ...) -> None: ...

class RequestResponse(_message.Message):
    __slots__ = ("response_stream", "batch", "replies", "message")
    RESPONSE_STREAM_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    response_stream: str
    batch: _messages_pb2.RecordBatch
    replies: _containers.RepeatedCompositeFieldContainer[GatheredReply]
    message: SingleMessage
    def __init__(self, response_stream: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., replies: _Optional[_Iterable[_Union[GatheredReply, _Mapping]]] = ..., message: _Optional[_Union[SingleMessage, _Mapping]] = ...) -> None: ...

class GatheredReply(_message.Message):
    __slots__ = ("batch", "error", "message")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    batch: _messages_pb2.RecordBatch
    error: _messages_pb2.CallStatus
    message: SingleMessage
    def __init__(self, batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., error: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., message: _Optional[_Union[SingleMessage, _Mapping]] = ...) -> None: ...

class RequestStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response", "more_answers")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    MORE_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: RequestResponse
    more_answers: _containers.RepeatedCompositeFieldContainer[RequestStreamResponse]
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[RequestResponse, _Mapping]] = ..., more_answers: _Optional[_Iterable[_Union[RequestStreamResponse, _Mapping]]] = ...) -> None: ...

class ReplyRequest(_message.Message):
    __slots__ = ("response_stream", "batch", "error", "message", "call_id", "more_calls")
    RESPONSE_STREAM_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MORE_CALLS_FIELD_NUMBER: _ClassVar[int]
    response_stream: str
    batch: _messages_pb2.RecordBatch
    error: _messages_pb2.CallStatus
    message: SingleMessage
    call_id: int
    more_calls: _containers.RepeatedCompositeFieldContainer[ReplyRequest]
    def __init__(self, response_stream: _Optional[str] = ..., batch: _Optional[_Union[_messages_pb2.RecordBatch, _Mapping]] = ..., error: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., message: _Optional[_Union[SingleMessage, _Mapping]] = ..., call_id: _Optional[int] = ..., more_calls: _Optional[_Iterable[_Union[ReplyRequest, _Mapping]]] = ...) -> None: ...

class ReplyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplyStreamResponse(_message.Message):
    __slots__ = ("call_id", "status", "response", "more_answers")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    MORE_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    status: _messages_pb2.CallStatus
    response: ReplyResponse
    more_answers: _containers.RepeatedCompositeFieldContainer[ReplyStreamResponse]
    def __init__(self, call_id: _Optional[int] = ..., status: _Optional[_Union[_messages_pb2.CallStatus, _Mapping]] = ..., response: _Optional[_Union[ReplyResponse, _Mapping]] = ..., more_answers: _Optional[_Iterable[_Union[ReplyStreamResponse, _Mapping]]] = ...) -> None: ...

class ListSubscriptionsRequest(_message.Message):
    __slots__ = ("stream",)
    STREAM_FIELD_NUMBER: _ClassVar[int]
    stream: str
    def __init__(self, stream: _Optional[str] = ...) -> None: ...

class ListSubscriptionsResponse(_message.Message):
    __slots__ = ("subscriptions",)
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    subscriptions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, subscriptions: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeSubscriptionRequest(_message.Message):
    __slots__ = ("stream", "subscription")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    subscription: str
    def __init__(self, stream: _Optional[str] = ..., subscription: _Optional[str] = ...) -> None: ...

class SubscriptionInfo(_message.Message):
    __slots__ = ("stream", "subscription", "partitions")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    subscription: str
    partitions: _containers.RepeatedCompositeFieldContainer[_messages_pb2.SubscriptionPartition]
    def __init__(self, stream: _Optional[str] = ..., subscription: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[_messages_pb2.SubscriptionPartition, _Mapping]]] = ...) -> None: ...

class SeekSubscriptionRequest(_message.Message):
    __slots__ = ("stream", "subscription", "target", "partitions", "offsets", "dry_run")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    stream: str
    subscription: str
    target: _messages_pb2.SeekTarget
    partitions: _containers.RepeatedScalarFieldContainer[int]
    offsets: _containers.ScalarMap[int, int]
    dry_run: bool
    def __init__(self, stream: _Optional[str] = ..., subscription: _Optional[str] = ..., target: _Optional[_Union[_messages_pb2.SeekTarget, _Mapping]] = ..., partitions: _Optional[_Iterable[int]] = ..., offsets: _Optional[_Mapping[int, int]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class DeleteSubscriptionRequest(_message.Message):
    __slots__ = ("stream", "subscription")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    subscription: str
    def __init__(self, stream: _Optional[str] = ..., subscription: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class StreamStats(_message.Message):
    __slots__ = ("stream", "partitions")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partitions: _containers.RepeatedCompositeFieldContainer[_messages_pb2.PartitionStats]
    def __init__(self, stream: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[_messages_pb2.PartitionStats, _Mapping]]] = ...) -> None: ...

class GetMessagesRequest(_message.Message):
    __slots__ = ("stream", "partition", "offset", "count", "subscription")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    offset: int
    count: int
    subscription: str
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., count: _Optional[int] = ..., subscription: _Optional[str] = ...) -> None: ...

class GetMessagesResponse(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[_messages_pb2.StoredBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[_messages_pb2.StoredBatch, _Mapping]]] = ...) -> None: ...

class MovePartitionRequest(_message.Message):
    __slots__ = ("stream", "partition", "router")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ROUTER_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    router: str
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., router: _Optional[str] = ...) -> None: ...

class MovePartitionResponse(_message.Message):
    __slots__ = ("stream", "partition", "router")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ROUTER_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    router: str
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., router: _Optional[str] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node", "undrain")
    NODE_FIELD_NUMBER: _ClassVar[int]
    UNDRAIN_FIELD_NUMBER: _ClassVar[int]
    node: str
    undrain: bool
    def __init__(self, node: _Optional[str] = ..., undrain: _Optional[bool] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("node", "drained", "drained_nodes")
    NODE_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    DRAINED_NODES_FIELD_NUMBER: _ClassVar[int]
    node: str
    drained: bool
    drained_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., drained: _Optional[bool] = ..., drained_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class DeployFunctionRequest(_message.Message):
    __slots__ = ("spec_json",)
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    spec_json: str
    def __init__(self, spec_json: _Optional[str] = ...) -> None: ...

class FunctionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class FunctionInfo(_message.Message):
    __slots__ = ("name", "spec_json", "version", "state", "identity", "api_key_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    API_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec_json: str
    version: int
    state: str
    identity: str
    api_key_id: str
    def __init__(self, name: _Optional[str] = ..., spec_json: _Optional[str] = ..., version: _Optional[int] = ..., state: _Optional[str] = ..., identity: _Optional[str] = ..., api_key_id: _Optional[str] = ...) -> None: ...

class DeleteFunctionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListFunctionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFunctionsResponse(_message.Message):
    __slots__ = ("functions",)
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    functions: _containers.RepeatedCompositeFieldContainer[FunctionInfo]
    def __init__(self, functions: _Optional[_Iterable[_Union[FunctionInfo, _Mapping]]] = ...) -> None: ...

class FunctionInstanceStatus(_message.Message):
    __slots__ = ("instance", "node", "version", "processed", "published", "errors", "last_error", "restarts", "rate")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    instance: str
    node: str
    version: int
    processed: int
    published: int
    errors: int
    last_error: str
    restarts: int
    rate: float
    def __init__(self, instance: _Optional[str] = ..., node: _Optional[str] = ..., version: _Optional[int] = ..., processed: _Optional[int] = ..., published: _Optional[int] = ..., errors: _Optional[int] = ..., last_error: _Optional[str] = ..., restarts: _Optional[int] = ..., rate: _Optional[float] = ...) -> None: ...

class FunctionInputLag(_message.Message):
    __slots__ = ("stream", "backlog_messages", "oldest_unacked_publish_time_us")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_PUBLISH_TIME_US_FIELD_NUMBER: _ClassVar[int]
    stream: str
    backlog_messages: int
    oldest_unacked_publish_time_us: int
    def __init__(self, stream: _Optional[str] = ..., backlog_messages: _Optional[int] = ..., oldest_unacked_publish_time_us: _Optional[int] = ...) -> None: ...

class FunctionStatus(_message.Message):
    __slots__ = ("function", "instances", "lag")
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    function: FunctionInfo
    instances: _containers.RepeatedCompositeFieldContainer[FunctionInstanceStatus]
    lag: _containers.RepeatedCompositeFieldContainer[FunctionInputLag]
    def __init__(self, function: _Optional[_Union[FunctionInfo, _Mapping]] = ..., instances: _Optional[_Iterable[_Union[FunctionInstanceStatus, _Mapping]]] = ..., lag: _Optional[_Iterable[_Union[FunctionInputLag, _Mapping]]] = ...) -> None: ...
