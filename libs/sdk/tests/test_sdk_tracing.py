"""Trace context in message headers: added where a message has none, a caller's own
kept, nothing added when no span is current."""

from __future__ import annotations

from tamto_sdk.tracing import TRACEPARENT, batch_headers, tracing, with_context

CONTEXT = {TRACEPARENT: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
OWN = {TRACEPARENT: "00-11111111111111111111111111111111-2222222222222222-01"}


def test_a_message_gets_the_context_unless_it_carries_its_own() -> None:
    assert with_context(None, CONTEXT) == CONTEXT
    assert with_context({"a": "b"}, CONTEXT) == {"a": "b", **CONTEXT}
    assert with_context(OWN, CONTEXT) == OWN


def test_a_batch_gets_the_context_per_message_where_it_lacks_one() -> None:
    assert batch_headers(None, 2, CONTEXT) == [CONTEXT, CONTEXT]
    assert batch_headers([OWN, None, {"a": "b"}], 3, CONTEXT) == [
        OWN,
        CONTEXT,
        {"a": "b", **CONTEXT},
    ]


def test_nothing_is_traced_without_a_current_span() -> None:
    assert not tracing()
