"""Every name the SDK's vocabulary replaced (docs/sdk.md, "Names") still works for one
release and warns: the old top-level exports, `Subscription`, `publish`/`publish_batch`
and `next_batch` on the ephemeral side, `linger_ms=` and `type=`. And the environment
is read by `connect`, not by `ClientOptions`."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import grpc
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

import tamto_sdk
import tamto_sdk.ephemeral as ephemeral
from tamto_protocol.batch import encode_record_batch, make_batch
from tamto_protocol.v1 import gateway_pb2, messages_pb2
from tamto_sdk import Client, ClientOptions, SubscriptionType, connect
from tamto_sdk.columns import binary_array
from tamto_sdk.ephemeral_producer import EphemeralProducer
from tamto_sdk.ephemeral_subscription import EphemeralSubscription


def test_the_top_level_exports_only_the_documented_surface() -> None:
    """The list in docs/sdk.md, and each name in it resolves without a warning."""
    assert sorted(tamto_sdk.__all__) == sorted(
        [
            *("Client", "ClientOptions", "connect", "errors", "TamtoError"),
            *("Producer", "PublishResult", "PublishedBatch"),
            *("Consumer", "Message", "MessageBatch", "Start", "StartPosition"),
            *("SubscriptionType", "StreamConfig", "EphemeralConfig"),
            *("EphemeralProducer", "EphemeralSubscription", "EphemeralMessage"),
            *("EphemeralBatch", "Reply"),
        ]
    )
    for name in tamto_sdk.__all__:
        assert getattr(tamto_sdk, name) is not None  # filterwarnings=error: none warns


@pytest.mark.parametrize("name", sorted(tamto_sdk._MOVED))
def test_a_name_moved_to_a_submodule_warns_and_is_the_submodules(name: str) -> None:
    module = importlib.import_module(tamto_sdk._MOVED[name])
    with pytest.warns(DeprecationWarning, match=f"tamto_sdk.{name} is deprecated.*{name}"):
        value = getattr(tamto_sdk, name)
    assert value is getattr(module, name)


def test_from_import_of_a_moved_name_warns() -> None:
    with pytest.warns(DeprecationWarning, match="use tamto_sdk.errors.NotFound"):
        from tamto_sdk import NotFound
    assert NotFound is tamto_sdk.errors.NotFound


def test_subscription_is_the_ephemeral_subscription_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match="use tamto_sdk.EphemeralSubscription"):
        assert tamto_sdk.Subscription is EphemeralSubscription
    with pytest.warns(DeprecationWarning, match="use EphemeralSubscription"):
        assert ephemeral.Subscription is EphemeralSubscription


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = tamto_sdk.Nope


async def test_consumer_type_warns_and_still_sets_the_subscription_type(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    with pytest.warns(DeprecationWarning, match=r"consumer\(type=...\) is deprecated"):
        consumer = client.consumer("s", "old", type=SubscriptionType.SHARED)
    async with consumer:
        assert consumer.subscription_type is SubscriptionType.SHARED
        await gateway.wait_for(lambda: len(gateway.sessions) == 1)
    assert gateway.sessions[0].type == messages_pb2.SUBSCRIPTION_TYPE_SHARED


async def test_consumer_type_and_subscription_type_together_are_refused(client: Client) -> None:
    with pytest.raises(TypeError, match="both type= and subscription_type="):
        client.consumer(
            "s",
            "x",
            type=SubscriptionType.SHARED,
            subscription_type=SubscriptionType.FAILOVER,
        )


async def test_producer_linger_ms_warns_and_counts_milliseconds(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    with pytest.warns(DeprecationWarning, match=r"producer\(linger_ms=...\) is deprecated"):
        producer = client.producer("s", linger_ms=250)
    assert producer._accumulator._linger_s == 0.25
    async with producer:
        result = await producer.send_and_wait(b"x")
    assert result.offset == 0


async def test_producer_linger_ms_and_linger_s_together_are_refused(client: Client) -> None:
    with pytest.raises(TypeError, match="both linger_ms= and linger_s="):
        client.producer("s", linger_ms=5, linger_s=0.005)


class RecordingCalls:
    """What an `EphemeralProducer` calls, recording each PublishEphemeral request."""

    def __init__(self) -> None:
        self.requests: list[gateway_pb2.PublishEphemeralRequest] = []
        self.publish_ephemeral_raw = object()

    async def unary(self, method: object, request: Any, *, retry: bool) -> Any:
        parsed = gateway_pb2.PublishEphemeralRequest.FromString(request(1))
        self.requests.append(parsed)
        return gateway_pb2.PublishEphemeralResponse(count=parsed.batch.count, matched_entities=2)


async def test_ephemeral_publish_and_publish_batch_warn_and_send() -> None:
    calls = RecordingCalls()
    producer = EphemeralProducer(calls, "e")  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match="use EphemeralProducer.send_batch"):
        assert await producer.publish_batch([b"a", b"b"], topic="t.one") == 2
    with pytest.warns(DeprecationWarning, match="use EphemeralProducer.send$"):
        await producer.publish(b"c", topic="t.two")
    await producer.close()
    assert [(r.topic, r.batch.count) for r in calls.requests] == [("t.one", 2), ("t.two", 1)]


class OneDelivery:
    """A started SubscribeEphemeral call that delivers one batch, then ends."""

    def __init__(self) -> None:
        batch = messages_pb2.RecordBatch(
            arrow_ipc=encode_record_batch(make_batch(binary_array([b"p"]))), count=1
        )
        self._events = [
            gateway_pb2.EphemeralEvent(
                delivery=gateway_pb2.EphemeralDelivery(stream="e", topic="t", batch=batch)
            )
        ]

    async def read(self) -> Any:
        return self._events.pop(0) if self._events else grpc.aio.EOF

    def cancel(self) -> None:
        self._events.clear()


async def test_ephemeral_next_batch_warns_and_receives() -> None:
    sub = EphemeralSubscription(None, "e", match="#", group="", consumer_name="")  # type: ignore[arg-type]
    sub._call = OneDelivery()
    with pytest.warns(DeprecationWarning, match="use EphemeralSubscription.receive_batch"):
        batch = await sub.next_batch()
    assert batch is not None
    assert [m.payload for m in batch] == [b"p"]
    await sub.close()


def test_client_options_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAMTO_DIRECT", "1")
    assert ClientOptions().direct is None


@pytest.mark.parametrize(
    ("env", "given", "taken"),
    [
        ("1", None, True),
        ("0", None, False),
        ("off", None, False),
        (None, None, True),
        ("1", False, False),
        ("0", True, True),
    ],
)
async def test_connect_reads_tamto_direct_when_the_options_leave_it(
    gateway: FakeGateway,
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    given: bool | None,
    taken: bool,
) -> None:
    if env is None:
        monkeypatch.delenv("TAMTO_DIRECT", raising=False)
    else:
        monkeypatch.setenv("TAMTO_DIRECT", env)
    options = dataclasses.replace(FAST, direct=given)
    async with connect(gateway.url, api_key=API_KEY, options=options) as client:
        assert client.options.direct is taken
        assert (client._calls.direct is not None) is taken
