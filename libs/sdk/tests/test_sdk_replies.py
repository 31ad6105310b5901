"""Request/reply's SDK pieces that need no gateway: the error status a raising
reply handler sends, and the names that moved from `tamto_sdk.ephemeral`."""

from __future__ import annotations

import pytest

import tamto_sdk.ephemeral as ephemeral
from tamto_sdk import replies
from tamto_sdk.errors import InvalidArgument, NotFound


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (InvalidArgument("quantity must be positive"), 3, "quantity must be positive"),
        (NotFound("no such order"), 5, "no such order"),
        (KeyError("k"), 2, "KeyError: 'k'"),  # any other exception: UNKNOWN naming it
        (ValueError("é" * 3000), 2, "ValueError: " + "é" * 2042),  # cut at 4096 bytes
    ],
)
def test_a_raised_error_becomes_a_reply_status(
    error: BaseException, code: int, message: str
) -> None:
    assert replies.error_status(error) == (code, message)
    assert len(replies.error_status(error)[1].encode()) <= replies.MAX_ERROR_MESSAGE_BYTES


def test_request_reply_names_moved_to_replies_still_import_from_ephemeral() -> None:
    """`tamto_sdk.ephemeral.ReplyHandler` (and the other request/reply names) moved to
    `tamto_sdk.replies`: the old path still works, with a DeprecationWarning."""
    for name in ("ReplyHandler", "request", "reply", "timeout_ms", "Handler"):
        with pytest.warns(DeprecationWarning, match=f"moved to tamto_sdk.replies.{name}"):
            found = getattr(ephemeral, name)
        assert found is getattr(replies, name)
    with pytest.raises(AttributeError):
        ephemeral.no_such_name  # noqa: B018
