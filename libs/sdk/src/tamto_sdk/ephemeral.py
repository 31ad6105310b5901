"""Ephemeral streams and request/reply in the SDK (docs/ephemeral.md): the names.

- `EphemeralProducer` (`client.ephemeral_producer`, `tamto_sdk.ephemeral_producer`):
  `send(payload, topic=...)`, at most once.
- `EphemeralSubscription` (`client.subscribe`, `tamto_sdk.ephemeral_subscription`):
  an async iterator of `EphemeralMessage` (or `EphemeralBatch`es).
- the messages and their Arrow encoding: `tamto_sdk.ephemeral_messages`.

Request/reply, built on these, is in `tamto_sdk.replies`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from tamto_sdk._deprecated import renamed
from tamto_sdk.ephemeral_messages import (
    EphemeralBatch,
    EphemeralMessage,
    encode_arrow,
    encode_messages,
)
from tamto_sdk.ephemeral_producer import EphemeralProducer
from tamto_sdk.ephemeral_subscription import DELIVERIES_PER_EVENT, EphemeralSubscription

__all__ = [
    "DELIVERIES_PER_EVENT",
    "EphemeralBatch",
    "EphemeralMessage",
    "EphemeralProducer",
    "EphemeralSubscription",
    "encode_arrow",
    "encode_messages",
]

#: Request/reply names this module had before they moved to `tamto_sdk.replies`.
_MOVED = ("Handler", "MAX_REQUEST_TIMEOUT_S", "ReplyHandler", "reply", "request", "timeout_ms")


def __getattr__(name: str) -> Any:
    """Deprecated names still found here: `Subscription` (now `EphemeralSubscription`)
    and the request/reply names that moved to `tamto_sdk.replies`."""
    if name == "Subscription":
        renamed("tamto_sdk.ephemeral.Subscription", "EphemeralSubscription")
        return EphemeralSubscription
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"tamto_sdk.ephemeral.{name} moved to tamto_sdk.replies.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    # By name, not an import statement: this deprecated alias (kept one release) is the
    # only way back from here to `replies`, which builds on this module.
    return getattr(importlib.import_module("tamto_sdk.replies"), name)
