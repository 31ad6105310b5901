from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StreamKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_KIND_UNSPECIFIED: _ClassVar[StreamKind]
    STREAM_KIND_PERSISTENT: _ClassVar[StreamKind]
    STREAM_KIND_EPHEMERAL: _ClassVar[StreamKind]

class Overflow(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERFLOW_UNSPECIFIED: _ClassVar[Overflow]
    OVERFLOW_DROP_OLDEST: _ClassVar[Overflow]
    OVERFLOW_DROP_NEWEST: _ClassVar[Overflow]

class Durability(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DURABILITY_UNSPECIFIED: _ClassVar[Durability]
    DURABILITY_GROUP_COMMIT: _ClassVar[Durability]
    DURABILITY_INTERVAL: _ClassVar[Durability]

class RetentionPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETENTION_POLICY_UNSPECIFIED: _ClassVar[RetentionPolicy]
    RETENTION_POLICY_LIMITS: _ClassVar[RetentionPolicy]
    RETENTION_POLICY_INTEREST: _ClassVar[RetentionPolicy]

class SubscriptionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUBSCRIPTION_TYPE_UNSPECIFIED: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_EXCLUSIVE: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_FAILOVER: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_SHARED: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_KEY_SHARED: _ClassVar[SubscriptionType]
    SUBSCRIPTION_TYPE_MULTICAST: _ClassVar[SubscriptionType]
STREAM_KIND_UNSPECIFIED: StreamKind
STREAM_KIND_PERSISTENT: StreamKind
STREAM_KIND_EPHEMERAL: StreamKind
OVERFLOW_UNSPECIFIED: Overflow
OVERFLOW_DROP_OLDEST: Overflow
OVERFLOW_DROP_NEWEST: Overflow
DURABILITY_UNSPECIFIED: Durability
DURABILITY_GROUP_COMMIT: Durability
DURABILITY_INTERVAL: Durability
RETENTION_POLICY_UNSPECIFIED: RetentionPolicy
RETENTION_POLICY_LIMITS: RetentionPolicy
RETENTION_POLICY_INTEREST: RetentionPolicy
SUBSCRIPTION_TYPE_UNSPECIFIED: SubscriptionType
SUBSCRIPTION_TYPE_EXCLUSIVE: SubscriptionType
SUBSCRIPTION_TYPE_FAILOVER: SubscriptionType
SUBSCRIPTION_TYPE_SHARED: SubscriptionType
SUBSCRIPTION_TYPE_KEY_SHARED: SubscriptionType
SUBSCRIPTION_TYPE_MULTICAST: SubscriptionType

class RecordBatch(_message.Message):
    __slots__ = ("arrow_ipc", "count")
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    arrow_ipc: bytes
    count: int
    def __init__(self, arrow_ipc: _Optional[bytes] = ..., count: _Optional[int] = ...) -> None: ...

class ProducerOrder(_message.Message):
    __slots__ = ("producer", "last_sequence", "after_sequence")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    producer: str
    last_sequence: int
    after_sequence: int
    def __init__(self, producer: _Optional[str] = ..., last_sequence: _Optional[int] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class CallStatus(_message.Message):
    __slots__ = ("code", "message", "trailing_metadata")
    class TrailingMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRAILING_METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    trailing_metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., trailing_metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StoredBatch(_message.Message):
    __slots__ = ("base_offset", "count", "publish_time_us", "arrow_ipc")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_TIME_US_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    count: int
    publish_time_us: int
    arrow_ipc: bytes
    def __init__(self, base_offset: _Optional[int] = ..., count: _Optional[int] = ..., publish_time_us: _Optional[int] = ..., arrow_ipc: _Optional[bytes] = ...) -> None: ...

class StreamConfig(_message.Message):
    __slots__ = ("kind", "partitions", "retention_ms", "retention_bytes", "dedup_window_ms", "ack_timeout_ms", "max_deliveries", "max_lag", "dead_letter_stream", "durability", "fsync_interval_ms", "retention_policy", "buffer_messages", "overflow", "request_timeout_ms", "replication_factor", "ack_quorum")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEDUP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    MAX_LAG_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_STREAM_FIELD_NUMBER: _ClassVar[int]
    DURABILITY_FIELD_NUMBER: _ClassVar[int]
    FSYNC_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_POLICY_FIELD_NUMBER: _ClassVar[int]
    BUFFER_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OVERFLOW_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    ACK_QUORUM_FIELD_NUMBER: _ClassVar[int]
    kind: StreamKind
    partitions: int
    retention_ms: int
    retention_bytes: int
    dedup_window_ms: int
    ack_timeout_ms: int
    max_deliveries: int
    max_lag: int
    dead_letter_stream: str
    durability: Durability
    fsync_interval_ms: int
    retention_policy: RetentionPolicy
    buffer_messages: int
    overflow: Overflow
    request_timeout_ms: int
    replication_factor: int
    ack_quorum: int
    def __init__(self, kind: _Optional[_Union[StreamKind, str]] = ..., partitions: _Optional[int] = ..., retention_ms: _Optional[int] = ..., retention_bytes: _Optional[int] = ..., dedup_window_ms: _Optional[int] = ..., ack_timeout_ms: _Optional[int] = ..., max_deliveries: _Optional[int] = ..., max_lag: _Optional[int] = ..., dead_letter_stream: _Optional[str] = ..., durability: _Optional[_Union[Durability, str]] = ..., fsync_interval_ms: _Optional[int] = ..., retention_policy: _Optional[_Union[RetentionPolicy, str]] = ..., buffer_messages: _Optional[int] = ..., overflow: _Optional[_Union[Overflow, str]] = ..., request_timeout_ms: _Optional[int] = ..., replication_factor: _Optional[int] = ..., ack_quorum: _Optional[int] = ...) -> None: ...

class StreamInfo(_message.Message):
    __slots__ = ("name", "config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    config: StreamConfig
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[StreamConfig, _Mapping]] = ...) -> None: ...

class StartPosition(_message.Message):
    __slots__ = ("earliest", "latest", "offset", "time_us")
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIME_US_FIELD_NUMBER: _ClassVar[int]
    earliest: bool
    latest: bool
    offset: int
    time_us: int
    def __init__(self, earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., offset: _Optional[int] = ..., time_us: _Optional[int] = ...) -> None: ...

class OffsetRange(_message.Message):
    __slots__ = ("first", "last")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    first: int
    last: int
    def __init__(self, first: _Optional[int] = ..., last: _Optional[int] = ...) -> None: ...

class PartitionAcks(_message.Message):
    __slots__ = ("partition", "ranges")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    ranges: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    def __init__(self, partition: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("stream", "subscription", "start", "partitions", "type", "consumer_name", "client_address", "consumer_id")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    stream: str
    subscription: str
    start: StartPosition
    partitions: _containers.RepeatedScalarFieldContainer[int]
    type: SubscriptionType
    consumer_name: str
    client_address: str
    consumer_id: str
    def __init__(self, stream: _Optional[str] = ..., subscription: _Optional[str] = ..., start: _Optional[_Union[StartPosition, _Mapping]] = ..., partitions: _Optional[_Iterable[int]] = ..., type: _Optional[_Union[SubscriptionType, str]] = ..., consumer_name: _Optional[str] = ..., client_address: _Optional[str] = ..., consumer_id: _Optional[str] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: int
    def __init__(self, messages: _Optional[int] = ...) -> None: ...

class PartitionNacks(_message.Message):
    __slots__ = ("partition", "ranges", "delay_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    ranges: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    delay_ms: int
    def __init__(self, partition: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class Close(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartitionTerms(_message.Message):
    __slots__ = ("partition", "ranges", "reason")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    partition: int
    ranges: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    reason: str
    def __init__(self, partition: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ..., reason: _Optional[str] = ...) -> None: ...

class PartitionProgress(_message.Message):
    __slots__ = ("partition", "ranges")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    partition: int
    ranges: _containers.RepeatedCompositeFieldContainer[OffsetRange]
    def __init__(self, partition: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[OffsetRange, _Mapping]]] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("subscribe", "credit", "ack", "nack", "close", "term", "in_progress")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    subscribe: Subscribe
    credit: Credit
    ack: PartitionAcks
    nack: PartitionNacks
    close: Close
    term: PartitionTerms
    in_progress: PartitionProgress
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., credit: _Optional[_Union[Credit, _Mapping]] = ..., ack: _Optional[_Union[PartitionAcks, _Mapping]] = ..., nack: _Optional[_Union[PartitionNacks, _Mapping]] = ..., close: _Optional[_Union[Close, _Mapping]] = ..., term: _Optional[_Union[PartitionTerms, _Mapping]] = ..., in_progress: _Optional[_Union[PartitionProgress, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("stream", "partition", "batch", "delivery_count", "offsets")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    stream: str
    partition: int
    batch: StoredBatch
    delivery_count: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stream: _Optional[str] = ..., partition: _Optional[int] = ..., batch: _Optional[_Union[StoredBatch, _Mapping]] = ..., delivery_count: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class StreamError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ("delivery", "error")
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    delivery: Delivery
    error: StreamError
    def __init__(self, delivery: _Optional[_Union[Delivery, _Mapping]] = ..., error: _Optional[_Union[StreamError, _Mapping]] = ...) -> None: ...

class SeekTarget(_message.Message):
    __slots__ = ("earliest", "latest", "offset", "time_us", "skip", "shift")
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIME_US_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    earliest: bool
    latest: bool
    offset: int
    time_us: int
    skip: int
    shift: int
    def __init__(self, earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., offset: _Optional[int] = ..., time_us: _Optional[int] = ..., skip: _Optional[int] = ..., shift: _Optional[int] = ...) -> None: ...

class SubscriptionConsumer(_message.Message):
    __slots__ = ("name", "address", "credits", "unacked")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    UNACKED_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    credits: int
    unacked: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., credits: _Optional[int] = ..., unacked: _Optional[int] = ...) -> None: ...

class SubscriptionPartition(_message.Message):
    __slots__ = ("partition", "exists", "start_offset", "ack_floor", "position", "end_offset", "backlog_messages", "backlog_bytes", "unacked", "oldest_unacked_publish_time_us", "redeliveries", "dead_lettered", "type", "consumers", "seek_to")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ACK_FLOOR_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    UNACKED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_PUBLISH_TIME_US_FIELD_NUMBER: _ClassVar[int]
    REDELIVERIES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    SEEK_TO_FIELD_NUMBER: _ClassVar[int]
    partition: int
    exists: bool
    start_offset: int
    ack_floor: int
    position: int
    end_offset: int
    backlog_messages: int
    backlog_bytes: int
    unacked: int
    oldest_unacked_publish_time_us: int
    redeliveries: int
    dead_lettered: int
    type: SubscriptionType
    consumers: _containers.RepeatedCompositeFieldContainer[SubscriptionConsumer]
    seek_to: int
    def __init__(self, partition: _Optional[int] = ..., exists: _Optional[bool] = ..., start_offset: _Optional[int] = ..., ack_floor: _Optional[int] = ..., position: _Optional[int] = ..., end_offset: _Optional[int] = ..., backlog_messages: _Optional[int] = ..., backlog_bytes: _Optional[int] = ..., unacked: _Optional[int] = ..., oldest_unacked_publish_time_us: _Optional[int] = ..., redeliveries: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., type: _Optional[_Union[SubscriptionType, str]] = ..., consumers: _Optional[_Iterable[_Union[SubscriptionConsumer, _Mapping]]] = ..., seek_to: _Optional[int] = ...) -> None: ...

class PartitionStats(_message.Message):
    __slots__ = ("partition", "start_offset", "end_offset", "messages", "wal_bytes", "segment_bytes", "publish_rate", "owner")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    PUBLISH_RATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    partition: int
    start_offset: int
    end_offset: int
    messages: int
    wal_bytes: int
    segment_bytes: int
    publish_rate: float
    owner: str
    def __init__(self, partition: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., messages: _Optional[int] = ..., wal_bytes: _Optional[int] = ..., segment_bytes: _Optional[int] = ..., publish_rate: _Optional[float] = ..., owner: _Optional[str] = ...) -> None: ...
