"""The Tamto Python SDK: asyncio client, batching producer, credit-based consumer.

async with tamto_sdk.connect("tamto://127.0.0.1:7400", api_key="...") as client:
    ...
"""

from tamto_sdk import errors
from tamto_sdk.admin import Cluster, Streams
from tamto_sdk.client import Client, connect
from tamto_sdk.consumer import Consumer
from tamto_sdk.ephemeral import (
    EphemeralBatch,
    EphemeralMessage,
    EphemeralProducer,
    ReplyHandler,
    Subscription,
)
from tamto_sdk.errors import (
    AlreadyExists,
    Closed,
    DataLoss,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    TamtoError,
    Timeout,
    Unauthenticated,
    Unavailable,
    UndecodableBatch,
)
from tamto_sdk.functions import (
    FunctionInfo,
    FunctionInputLag,
    FunctionInstance,
    Functions,
    FunctionStatus,
)
from tamto_sdk.messages import (
    Durability,
    EnsureResult,
    EphemeralConfig,
    Message,
    MessageBatch,
    Overflow,
    PublishedBatch,
    PublishResult,
    RetentionPolicy,
    StreamConfig,
    StreamInfo,
    StreamKind,
)
from tamto_sdk.options import ClientOptions
from tamto_sdk.positions import Start, StartPosition, SubscriptionType
from tamto_sdk.producer import Producer
from tamto_sdk.security import (
    ApiKeyInfo,
    Grant,
    Identity,
    IdentityKind,
    NewApiKey,
    Permission,
    Role,
    Security,
    WhoAmI,
)
from tamto_sdk.subscriptions import (
    ConsumerInfo,
    PartitionStats,
    StreamStats,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
    Subscriptions,
)

__all__ = [
    "AlreadyExists",
    "ApiKeyInfo",
    "Client",
    "ClientOptions",
    "Closed",
    "Cluster",
    "Consumer",
    "ConsumerInfo",
    "DataLoss",
    "Durability",
    "EnsureResult",
    "EphemeralBatch",
    "EphemeralConfig",
    "EphemeralMessage",
    "EphemeralProducer",
    "FailedPrecondition",
    "FunctionInfo",
    "FunctionInputLag",
    "FunctionInstance",
    "FunctionStatus",
    "Functions",
    "Grant",
    "Identity",
    "IdentityKind",
    "Internal",
    "InvalidArgument",
    "Message",
    "MessageBatch",
    "NewApiKey",
    "NotFound",
    "OutOfRange",
    "Overflow",
    "PartitionStats",
    "Permission",
    "PermissionDenied",
    "Producer",
    "PublishResult",
    "PublishedBatch",
    "ReplyHandler",
    "ResourceExhausted",
    "RetentionPolicy",
    "Role",
    "Security",
    "Start",
    "StartPosition",
    "StreamConfig",
    "StreamInfo",
    "StreamKind",
    "StreamStats",
    "Streams",
    "Subscription",
    "SubscriptionInfo",
    "SubscriptionPartitionInfo",
    "SubscriptionType",
    "Subscriptions",
    "TamtoError",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "UndecodableBatch",
    "WhoAmI",
    "connect",
    "errors",
]
