"""The Tamto Python SDK: asyncio client, batching producer, credit-based consumer.

async with tamto_sdk.connect("tamto://127.0.0.1:7400", api_key="...") as client:
    ...

This package exports what an application that moves messages needs (`__all__`,
listed in docs/sdk.md, "Names"); the rest has a submodule of its own:
`tamto_sdk.errors` (every error), `tamto_sdk.stream_config` (stream settings and
descriptions), `tamto_sdk.subscriptions`, `tamto_sdk.security`,
`tamto_sdk.functions`, `tamto_sdk.admin` and `tamto_sdk.replies`. The names this
package exported before that live in a submodule still resolve here, with a
`DeprecationWarning`, for one release.

The names that move messages (`Consumer`, `Producer`, the ephemeral ones) load
their modules, and pyarrow, on first use (`__getattr__`): administration alone
(`tamto sub describe`) starts in a fraction of the time.
"""

import importlib
from typing import TYPE_CHECKING, Any

from tamto_sdk import admin, errors, functions, security, stream_config, subscriptions
from tamto_sdk._deprecated import renamed
from tamto_sdk.client import Client, connect
from tamto_sdk.errors import TamtoError
from tamto_sdk.messages import Message, MessageBatch, PublishedBatch, PublishResult
from tamto_sdk.options import ClientOptions
from tamto_sdk.positions import Start, StartPosition, SubscriptionType
from tamto_sdk.stream_config import EphemeralConfig, StreamConfig

if TYPE_CHECKING:
    from tamto_sdk.consumer import Consumer
    from tamto_sdk.ephemeral_messages import EphemeralBatch, EphemeralMessage
    from tamto_sdk.ephemeral_producer import EphemeralProducer
    from tamto_sdk.ephemeral_subscription import EphemeralSubscription
    from tamto_sdk.producer import Producer
    from tamto_sdk.replies import Reply

#: Names imported on first use: their modules load pyarrow.
_LAZY = {
    "Consumer": "tamto_sdk.consumer",
    "Producer": "tamto_sdk.producer",
    "EphemeralBatch": "tamto_sdk.ephemeral_messages",
    "EphemeralMessage": "tamto_sdk.ephemeral_messages",
    "EphemeralProducer": "tamto_sdk.ephemeral_producer",
    "EphemeralSubscription": "tamto_sdk.ephemeral_subscription",
    "Reply": "tamto_sdk.replies",
}


__all__ = [
    "Client",
    "ClientOptions",
    "Consumer",
    "EphemeralBatch",
    "EphemeralConfig",
    "EphemeralMessage",
    "EphemeralProducer",
    "EphemeralSubscription",
    "Message",
    "MessageBatch",
    "Producer",
    "PublishResult",
    "PublishedBatch",
    "Reply",
    "Start",
    "StartPosition",
    "StreamConfig",
    "SubscriptionType",
    "TamtoError",
    "connect",
    "errors",
]

#: Names this package exported before they went to a submodule (deprecated here): the
#: public classes of these submodules that are not in `__all__`, and `ReplyHandler`
#: (by name: `tamto_sdk.replies` loads pyarrow).
_MOVED = {
    **{
        name: module.__name__
        for module in (errors, admin, functions, security, stream_config, subscriptions)
        for name in module.__all__
        if name[0].isupper() and name not in __all__
    },
    "ReplyHandler": "tamto_sdk.replies",
}

#: Names this package exported under another name (deprecated).
_RENAMED = {"Subscription": "EphemeralSubscription"}


def __getattr__(name: str) -> Any:
    """The lazily imported names, and the deprecated ones (with a warning)."""
    if name in _RENAMED:
        renamed(f"tamto_sdk.{name}", f"tamto_sdk.{_RENAMED[name]}")
        return __getattr__(_RENAMED[name])
    if name in _MOVED:
        renamed(f"tamto_sdk.{name}", f"{_MOVED[name]}.{name}")
        return getattr(importlib.import_module(_MOVED[name]), name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tamto_sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
