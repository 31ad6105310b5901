"""The Tamto Python SDK: asyncio client, batching producer, credit-based consumer.

client = await tamto_sdk.connect("tamto://127.0.0.1:7400", api_key="...")
"""

from tamto_sdk import errors
from tamto_sdk.admin import Streams
from tamto_sdk.client import Client, connect
from tamto_sdk.consumer import Consumer
from tamto_sdk.errors import (
    AlreadyExists,
    Closed,
    DataLoss,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    TamtoError,
    Timeout,
    Unauthenticated,
    Unavailable,
)
from tamto_sdk.messages import (
    EnsureResult,
    Message,
    MessageBatch,
    PublishResult,
    StreamInfo,
    StreamKind,
)
from tamto_sdk.options import ClientOptions
from tamto_sdk.positions import Start, StartPosition
from tamto_sdk.producer import Producer

__all__ = [
    "AlreadyExists",
    "Client",
    "ClientOptions",
    "Closed",
    "Consumer",
    "DataLoss",
    "EnsureResult",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "Message",
    "MessageBatch",
    "NotFound",
    "PermissionDenied",
    "Producer",
    "PublishResult",
    "ResourceExhausted",
    "Start",
    "StartPosition",
    "StreamInfo",
    "StreamKind",
    "Streams",
    "TamtoError",
    "Timeout",
    "Unauthenticated",
    "Unavailable",
    "connect",
    "errors",
]
