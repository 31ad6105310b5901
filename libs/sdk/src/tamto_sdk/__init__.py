"""The Tamto Python SDK: asyncio client, batching producer, credit-based consumer.

async with tamto_sdk.connect("tamto://127.0.0.1:7400", api_key="...") as client:
    ...

The names that move messages (`Consumer`, `Producer`, the ephemeral ones) load
their modules, and pyarrow, on first use (`__getattr__`): administration alone
(`tamto sub describe`) starts in a fraction of the time.
"""

from typing import TYPE_CHECKING, Any

from tamto_sdk import errors
from tamto_sdk.admin import Cluster, Streams
from tamto_sdk.client import Client, connect
from tamto_sdk.errors import (
    AlreadyExists,
    Closed,
    DataLoss,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NoResponders,
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
from tamto_sdk.messages import Message, MessageBatch, PublishedBatch, PublishResult
from tamto_sdk.options import ClientOptions
from tamto_sdk.positions import Start, StartPosition, SubscriptionType
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
from tamto_sdk.stream_config import (
    Durability,
    EnsureResult,
    EphemeralConfig,
    Overflow,
    RetentionPolicy,
    StreamConfig,
    StreamInfo,
    StreamKind,
)
from tamto_sdk.subscriptions import (
    ConsumerInfo,
    PartitionStats,
    StreamStats,
    SubscriptionInfo,
    SubscriptionPartitionInfo,
    Subscriptions,
    SubscriptionSummary,
)

if TYPE_CHECKING:
    from tamto_sdk.consumer import Consumer
    from tamto_sdk.ephemeral import (
        EphemeralBatch,
        EphemeralMessage,
        EphemeralProducer,
        Subscription,
    )
    from tamto_sdk.producer import Producer
    from tamto_sdk.replies import Reply, ReplyHandler

#: Names imported on first use: their modules load pyarrow.
_LAZY = {
    "Consumer": "tamto_sdk.consumer",
    "Producer": "tamto_sdk.producer",
    "EphemeralBatch": "tamto_sdk.ephemeral",
    "EphemeralMessage": "tamto_sdk.ephemeral",
    "EphemeralProducer": "tamto_sdk.ephemeral",
    "Reply": "tamto_sdk.replies",
    "ReplyHandler": "tamto_sdk.replies",
    "Subscription": "tamto_sdk.ephemeral",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tamto_sdk' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
    "NoResponders",
    "NotFound",
    "OutOfRange",
    "Overflow",
    "PartitionStats",
    "Permission",
    "PermissionDenied",
    "Producer",
    "PublishResult",
    "PublishedBatch",
    "Reply",
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
    "SubscriptionSummary",
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
