"""The gateway's HTTP/JSON API end to end: httpx, websockets and curl against the real
system, every answer checked against the gateway's own /openapi.json."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

import tamto_sdk
from tamto_protocol.batch import BatchColumns, encode_batch
from tamto_sdk.security import Grant, Permission
from tamto_testing.cluster import TestCluster
from tamto_testing.infra import Infra
from tamto_testing.waiting import eventually
from tests.e2e.http_contract import Contract

pytestmark = pytest.mark.e2e

#: The cluster's gateway takes HTTP bodies up to this size (the 413 test).
MAX_BODY = 64 * 1024
#: ... and closes a long-poll consumer idle this long.
IDLE_S = 3.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def http_cluster(
    tamto_infra: Infra, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestCluster]:
    env = {
        "gateway": {
            "TAMTO_GATEWAY_HTTP_MAX_BODY_BYTES": str(MAX_BODY),
            "TAMTO_GATEWAY_HTTP_CONSUMER_IDLE_S": str(IDLE_S),
        }
    }
    with TestCluster(tmp_path_factory.mktemp("http"), tamto_infra).running(env) as cluster:
        yield cluster


class Api:
    """An httpx client of the gateway's HTTP API whose every answer is checked
    against /openapi.json."""

    def __init__(self, client: httpx.AsyncClient, contract: Contract) -> None:
        self.client = client
        self.contract = contract

    async def __call__(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = await self.client.request(method, path, **kwargs)
        self.contract.check(response)
        return response


@pytest.fixture
async def api(http_cluster: TestCluster) -> AsyncIterator[Api]:
    headers = {"X-Api-Key": http_cluster.credential}
    async with httpx.AsyncClient(
        base_url=http_cluster.http_url(), headers=headers, timeout=30
    ) as client:
        document = (await client.get("/openapi.json")).json()
        assert document["openapi"] == "3.1.0"
        yield Api(client, Contract(document))


async def ensure(api: Api, partitions: int = 1) -> str:
    stream = unique("http")
    response = await api("PUT", f"/v1/streams/{stream}", json={"partitions": partitions})
    assert response.status_code == 201, response.text
    return stream


async def poll_all(api: Api, consumer: str, n: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    for _ in range(50):
        response = await api(
            "GET", f"/v1/consumers/{consumer}/messages", params={"max_messages": n, "wait_ms": 2000}
        )
        assert response.status_code == 200, response.text
        got += response.json()["messages"]
        if len(got) >= n:
            return got
    raise AssertionError(f"only {len(got)} of {n} messages arrived")


async def open_consumer(api: Api, stream: str, sub: str, **params: str) -> str:
    response = await api(
        "POST",
        f"/v1/streams/{stream}/subscriptions/{sub}/consumers",
        params={"start": "earliest", **params},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["consumer_id"])


async def test_publish_json_raw_and_ndjson_then_long_poll_and_ack(api: Api) -> None:
    stream = await ensure(api, partitions=3)
    one = await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        params={"key": "k1", "id": "first"},
        json={"order": 1},
        headers={"Tamto-Header-Origin": "web"},
    )
    assert one.status_code == 200, one.text
    assert one.json()["count"] == 1
    raw = await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        params={"partition": "2"},
        content=b"\xff\x00binary",
        headers={"Content-Type": "application/octet-stream"},
    )
    assert raw.json()["messages"][0]["partition"] == 2
    lines = [
        {"value": {"n": i}, "key": f"k{i % 4}", "headers": {"i": str(i)}} for i in range(20)
    ] + [{"text": "plain words", "partition": 1}]
    batch = await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        content="\n".join(json.dumps(line) for line in lines) + "\n",
        headers={"Content-Type": "application/x-ndjson"},
    )
    placed = batch.json()["messages"]
    assert len(placed) == 21
    assert placed[-1]["partition"] == 1
    assert len({(p["partition"], p["offset"]) for p in placed}) == 21

    consumer = await open_consumer(api, stream, "reader")
    got = await poll_all(api, consumer, 23)
    assert len(got) == 23
    by_position = {(m["partition"], m["offset"]): m for m in got}
    first = by_position[
        (one.json()["messages"][0]["partition"], one.json()["messages"][0]["offset"])
    ]
    assert first["value"] == {"order": 1}
    assert first["key"] == "k1"
    assert first["id"] == "first"
    assert first["headers"] == {"origin": "web"}
    assert by_position[(2, raw.json()["messages"][0]["offset"])]["base64"] == "/wBiaW5hcnk="
    assert by_position[(1, placed[-1]["offset"])]["text"] == "plain words"
    for i, place in enumerate(placed[:20]):
        message = by_position[(place["partition"], place["offset"])]
        assert message["value"] == {"n": i}
        assert message["headers"] == {"i": str(i)}
    ack = await api(
        "POST",
        f"/v1/consumers/{consumer}/ack",
        json={"messages": [{"partition": m["partition"], "offset": m["offset"]} for m in got]},
    )
    assert ack.status_code == 204
    assert (await api("DELETE", f"/v1/consumers/{consumer}")).status_code == 204

    again = await open_consumer(api, stream, "reader")
    left = await api("GET", f"/v1/consumers/{again}/messages", params={"wait_ms": 500})
    assert left.json() == {"messages": []}, "acked messages must not come back"
    await api("DELETE", f"/v1/consumers/{again}")


async def test_a_nacked_message_is_delivered_again(api: Api) -> None:
    stream = await ensure(api)
    await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        content=b"again",
        headers={"Content-Type": "text/plain"},
    )
    consumer = await open_consumer(api, stream, "nacker")
    [message] = await poll_all(api, consumer, 1)
    assert message["delivery_count"] == 1
    position = {"partition": message["partition"], "offset": message["offset"]}
    nack = await api("POST", f"/v1/consumers/{consumer}/nack", json={"messages": [position]})
    assert nack.status_code == 204
    [redelivered] = await poll_all(api, consumer, 1)
    assert redelivered["offset"] == message["offset"]
    assert redelivered["delivery_count"] == 2
    assert redelivered["text"] == "again"
    await api("DELETE", f"/v1/consumers/{consumer}")


async def test_a_second_exclusive_consumer_gets_the_routers_refusal(api: Api) -> None:
    stream = await ensure(api)
    first = await open_consumer(api, stream, "only")
    assert (await poll_all_or_none(api, first)) == []
    second = await open_consumer(api, stream, "only")
    refused = await api("GET", f"/v1/consumers/{second}/messages", params={"wait_ms": 5000})
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "FAILED_PRECONDITION"
    gone = await api("GET", f"/v1/consumers/{second}/messages")
    assert gone.status_code == 404, "a failed consumer is forgotten"
    await api("DELETE", f"/v1/consumers/{first}")


async def poll_all_or_none(api: Api, consumer: str) -> list[dict[str, Any]]:
    response = await api("GET", f"/v1/consumers/{consumer}/messages", params={"wait_ms": 200})
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


async def test_publish_an_arrow_batch(api: Api) -> None:
    stream = await ensure(api, partitions=2)
    body = encode_batch(
        BatchColumns(
            payloads=[f"a{i}".encode() for i in range(50)],
            keys=[None] * 50,
            headers=[None] * 50,
            ids=[None] * 50,
            event_times_us=[None] * 50,
        )
    )
    response = await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        params={"partition": "1"},
        content=body,
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
    )
    assert response.status_code == 200, response.text
    assert [m["offset"] for m in response.json()["messages"]] == list(range(50))
    assert {m["partition"] for m in response.json()["messages"]} == {1}
    peek = await api(
        "GET",
        f"/v1/streams/{stream}/messages",
        params={"partition": "1", "offset": "10", "count": "3"},
    )
    assert [m["text"] for m in peek.json()["messages"]] == ["a10", "a11", "a12"]
    bad = await api(
        "POST",
        f"/v1/streams/{stream}/messages",
        content=b"not arrow",
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
    )
    assert bad.status_code == 400
    assert "malformed batch" in bad.json()["detail"]


async def test_server_sent_events_with_ack_and_credit(api: Api, http_cluster: TestCluster) -> None:
    stream = await ensure(api)
    for i in range(5):
        await api("POST", f"/v1/streams/{stream}/messages", json={"i": i})
    url = f"/v1/streams/{stream}/subscriptions/sse/events"
    async with api.client.stream(
        "GET", url, params={"start": "earliest", "credits": "2", "type": "shared"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)
        kind, data = await anext(events)
        assert kind == "consumer"
        consumer = data["consumer_id"]
        received: list[dict[str, Any]] = []
        while len(received) < 2:
            kind, data = await anext(events)
            assert kind == "messages"
            received += data["messages"]
        assert len(received) == 2, "a shared subscription sends no more than the credit"
        credit = await api("POST", f"/v1/consumers/{consumer}/credit", json={"messages": 10})
        assert credit.status_code == 204
        while len(received) < 5:
            kind, data = await anext(events)
            received += data["messages"]
        assert sorted(m["value"]["i"] for m in received) == list(range(5))
        positions = [{"partition": m["partition"], "offset": m["offset"]} for m in received]
        ack = await api("POST", f"/v1/consumers/{consumer}/ack", json={"messages": positions})
        assert ack.status_code == 204
    info = await api("GET", f"/v1/streams/{stream}/subscriptions/sse")
    assert info.json()["partitions"][0]["ack_floor"] == 5
    # The client went away: its session is closed.
    await eventually(
        lambda: attached(api, stream, "sse", 0), 10.0, "the SSE session to close", interval_s=0.1
    )


async def attached(api: Api, stream: str, sub: str, count: int) -> bool:
    info = (await api("GET", f"/v1/streams/{stream}/subscriptions/{sub}")).json()
    return sum(len(p["consumers"]) for p in info["partitions"]) == count


async def test_an_idle_long_poll_consumer_is_closed(api: Api) -> None:
    stream = await ensure(api)
    await api("POST", f"/v1/streams/{stream}/messages", json=1)
    consumer = await open_consumer(api, stream, "idle")
    assert len(await poll_all(api, consumer, 1)) == 1
    assert await attached(api, stream, "idle", 1)
    await eventually(
        lambda: attached(api, stream, "idle", 0), IDLE_S + 10, "the idle close", interval_s=0.1
    )
    gone = await api("GET", f"/v1/consumers/{consumer}/messages")
    assert gone.status_code == 404
    # Its unacked message went back to the subscription.
    again = await open_consumer(api, stream, "idle")
    [message] = await poll_all(api, again, 1)
    assert message["value"] == 1
    await api("DELETE", f"/v1/consumers/{again}")


async def test_tls_on_the_plaintext_port_fails_at_once(http_cluster: TestCluster) -> None:
    secure = http_cluster.http_url().replace("http://", "https://")
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"{secure}/openapi.json")
    assert time.monotonic() - started < 2


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    kind = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line[len("event: ") :]
        elif line.startswith("data: "):
            yield kind, json.loads(line[len("data: ") :])


async def test_websocket_consumes_with_frames(api: Api, http_cluster: TestCluster) -> None:
    stream = await ensure(api)
    for i in range(3):
        await api("POST", f"/v1/streams/{stream}/messages", json={"i": i})
    url = http_cluster.http_url().replace("http", "ws", 1)
    url += f"/v1/streams/{stream}/subscriptions/ws/ws?start=earliest&credits=0"
    headers = {"X-Api-Key": http_cluster.credential}
    async with websockets.connect(url, additional_headers=headers) as socket:
        hello = json.loads(await socket.recv())
        assert hello["type"] == "consumer"
        await socket.send(json.dumps({"credit": 10}))
        received: list[dict[str, Any]] = []
        while len(received) < 3:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
            assert frame["type"] == "messages"
            received += frame["messages"]
        first = {"partition": received[0]["partition"], "offset": received[0]["offset"]}
        await socket.send(json.dumps({"nack": [first]}))
        frame = json.loads(await asyncio.wait_for(socket.recv(), 10))
        [again] = frame["messages"]
        assert again["offset"] == first["offset"]
        assert again["delivery_count"] == 2
        positions = [{"partition": m["partition"], "offset": m["offset"]} for m in received]
        await socket.send(json.dumps({"ack": positions}))
        await socket.send(json.dumps({"close": True}))
        with pytest.raises(websockets.ConnectionClosedOK):
            await asyncio.wait_for(socket.recv(), 10)
    info = await api("GET", f"/v1/streams/{stream}/subscriptions/ws")
    assert info.json()["partitions"][0]["ack_floor"] == 3
    await eventually(
        lambda: attached(api, stream, "ws", 0),
        10.0,
        "the WebSocket session to close",
        interval_s=0.1,
    )

    for bad, detail in ((b"\x00binary", "not binary"), ("{nope", "not valid JSON")):
        async with websockets.connect(url, additional_headers=headers) as socket:
            assert json.loads(await socket.recv())["type"] == "consumer"
            await socket.send(bad)
            error = json.loads(await asyncio.wait_for(socket.recv(), 10))
            assert error["type"] == "error"
            assert detail in error["problem"]["detail"]
            with pytest.raises(websockets.ConnectionClosedError) as closed:
                await socket.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 4400

    async with websockets.connect(
        url.replace("start=earliest", "type=bogus"), additional_headers=headers
    ) as socket:
        error = json.loads(await socket.recv())
        assert error["type"] == "error"
        assert error["problem"]["status"] == 400
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            await socket.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 4400


async def test_stream_and_subscription_admin(api: Api) -> None:
    stream = await ensure(api, partitions=2)
    again = await api("PUT", f"/v1/streams/{stream}", json={"partitions": 2})
    assert again.status_code == 200
    assert again.json()["created"] is False
    differs = await api("PUT", f"/v1/streams/{stream}", json={"retention_ms": 1000})
    assert differs.json()["differences"], differs.json()
    described = (await api("GET", f"/v1/streams/{stream}")).json()
    assert described["name"] == stream
    assert described["config"]["partitions"] == 2
    assert described["config"]["kind"] == "STREAM_KIND_PERSISTENT"
    listed = (await api("GET", "/v1/streams")).json()["streams"]
    assert stream in [s["name"] for s in listed]
    stats = (await api("GET", f"/v1/streams/{stream}/stats")).json()
    assert [p["partition"] for p in stats["partitions"]] == [0, 1]
    for i in range(4):
        await api("POST", f"/v1/streams/{stream}/messages", params={"partition": "0"}, json=i)
    consumer = await open_consumer(api, stream, "admin-sub")
    await poll_all(api, consumer, 4)
    await api("DELETE", f"/v1/consumers/{consumer}")
    subs = await api("GET", f"/v1/streams/{stream}/subscriptions")
    assert subs.json() == {"subscriptions": ["admin-sub"]}
    seek = await api(
        "POST", f"/v1/streams/{stream}/subscriptions/admin-sub/seek", json={"offsets": {"0": 3}}
    )
    assert seek.status_code == 200, seek.text
    moved = (await api("GET", f"/v1/streams/{stream}/subscriptions/admin-sub")).json()
    assert moved["partitions"][0]["ack_floor"] == 3
    bad_seek = await api(
        "POST",
        f"/v1/streams/{stream}/subscriptions/admin-sub/seek",
        json={"target": {"nowhere": True}},
    )
    assert bad_seek.status_code == 400
    deleted = await api("DELETE", f"/v1/streams/{stream}/subscriptions/admin-sub")
    assert deleted.json() == {"deleted": True}
    gone = await api("GET", f"/v1/streams/{stream}/subscriptions/admin-sub")
    assert gone.status_code == 404
    assert gone.json()["code"] == "NOT_FOUND"
    assert (await api("DELETE", f"/v1/streams/{stream}")).json() == {"deleted": True}
    assert (await api("GET", f"/v1/streams/{stream}")).status_code == 404
    whoami = (await api("GET", "/v1/whoami")).json()
    assert whoami["subject"]


async def test_bad_input_gets_problems_and_the_gateway_serves_on(
    api: Api, http_cluster: TestCluster
) -> None:
    stream = await ensure(api)
    messages = f"/v1/streams/{stream}/messages"
    await check_bad_bodies_get_problems(api, messages)
    await check_bad_paths_get_problems(api, stream)
    await check_bad_credentials_get_problems(api, messages, http_cluster.credential)
    # Everyone else is served all along.
    ok = await api("POST", messages, json={"still": "serving"})
    assert ok.status_code == 200


async def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Check `response` is a problem+json of `status` and `code`; its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    return dict(body)


async def check_bad_bodies_get_problems(api: Api, messages: str) -> None:
    """Bodies that do not parse, are of the wrong type or too large: a problem each."""
    await problem(
        await api(
            "POST", messages, content=b"{not json", headers={"Content-Type": "application/json"}
        ),
        400,
        "INVALID_ARGUMENT",
    )
    await problem(
        await api(
            "POST",
            messages,
            content=b'{"value": 1}\n[2]\n',
            headers={"Content-Type": "application/x-ndjson"},
        ),
        400,
        "INVALID_ARGUMENT",
    )
    outside = await api(
        "POST",
        messages,
        content=b'{"text": "a"}\n{"text": "b", "partition": 7}\n',
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert (
        "has partitions 0-0, not 7" in (await problem(outside, 400, "INVALID_ARGUMENT"))["detail"]
    )
    await problem(
        await api(
            "PUT",
            f"/v1/streams/{unique('x')}",
            content=b"partitions=1",
            headers={"Content-Type": "text/plain"},
        ),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )
    await problem(
        await api("PUT", f"/v1/streams/{unique('x')}", json={"partitions": "many"}),
        400,
        "INVALID_ARGUMENT",
    )
    await problem(
        await api(
            "POST", messages, content=b"x" * (MAX_BODY + 1), headers={"Content-Type": "text/plain"}
        ),
        413,
        "CONTENT_TOO_LARGE",
    )


async def check_bad_paths_get_problems(api: Api, stream: str) -> None:
    """Paths to nothing, and a read of too many messages: a problem each."""
    await problem(await api("GET", f"/v1/consumers/{unique('c')}/messages"), 404, "NOT_FOUND")
    await problem(await api("GET", "/v1/nowhere"), 404, "NOT_FOUND")
    await problem(await api("GET", f"/v1/streams/{unique('none')}"), 404, "NOT_FOUND")
    await problem(
        await api("GET", f"/v1/streams/{stream}/messages", params={"count": "5000"}),
        400,
        "INVALID_ARGUMENT",
    )


async def check_bad_credentials_get_problems(api: Api, messages: str, credential: str) -> None:
    """Two credentials, none, or a forged token: a problem each; then the key again."""
    both = await api("GET", "/v1/whoami", headers={"Authorization": "Bearer x"})
    await problem(both, 401, "UNAUTHENTICATED")
    api.client.headers.pop("X-Api-Key")
    missing = await problem(await api("POST", messages, json=1), 401, "UNAUTHENTICATED")
    assert "missing bearer token" in missing["detail"]
    forged = await api("GET", "/v1/whoami", headers={"Authorization": "Bearer not.a.token"})
    await problem(forged, 401, "UNAUTHENTICATED")
    assert forged.headers["www-authenticate"].startswith("Bearer")
    api.client.headers["X-Api-Key"] = credential


async def test_an_identity_may_not_read_a_stream_it_has_no_grant_on(
    api: Api, http_cluster: TestCluster, tamto_infra: Infra
) -> None:
    stream = await ensure(api)
    identity, role = unique("writer"), unique("writer-role")
    async with tamto_sdk.connect(http_cluster.url, api_key=http_cluster.credential) as admin:
        await admin.security.create_identity(identity)
        key = (await admin.security.create_api_key(identity)).api_key
        await admin.security.put_role(role, [Grant(Permission.PUBLISH, stream)])
        await admin.security.bind(identity, role)
        async with tamto_sdk.connect(http_cluster.url, api_key=key) as client:
            token = (await client.security.token())[0]
    bearer = {"Authorization": f"Bearer {token}"}
    api.client.headers.pop("X-Api-Key")
    try:
        published = await api("POST", f"/v1/streams/{stream}/messages", json=1, headers=bearer)
        assert published.status_code == 200, published.text
        refused = await api(
            "POST", f"/v1/streams/{stream}/subscriptions/s/consumers", headers=bearer
        )
        assert refused.status_code == 403
        assert refused.json()["code"] == "PERMISSION_DENIED"
        by_key = await api("GET", f"/v1/streams/{stream}/subscriptions", headers={"X-Api-Key": key})
        assert by_key.status_code == 403
    finally:
        api.client.headers["X-Api-Key"] = http_cluster.credential
    audit = http_cluster.audit_file("gateway").read_text().splitlines()
    denials = [json.loads(line) for line in audit if identity in line]
    assert any(d["outcome"] == "denied" and d["source"].startswith("http:") for d in denials)


async def test_a_disabled_api_key_is_refused_at_once_despite_its_cached_token(
    api: Api, http_cluster: TestCluster
) -> None:
    identity = unique("keyed")
    async with tamto_sdk.connect(http_cluster.url, api_key=http_cluster.credential) as admin:
        await admin.security.create_identity(identity)
        key = await admin.security.create_api_key(identity)
        whoami = await api("GET", "/v1/whoami", headers={"X-Api-Key": key.api_key})
        assert whoami.json()["subject"] == identity
        await admin.security.set_api_key_disabled(key.info.key_id, True)

        async def refused() -> bool:
            response = await api("GET", "/v1/whoami", headers={"X-Api-Key": key.api_key})
            return response.status_code == 401

        await eventually(refused, 2.0, "the disabled key's requests to be refused")
        await admin.security.set_api_key_disabled(key.info.key_id, False)

        async def accepted() -> bool:
            response = await api("GET", "/v1/whoami", headers={"X-Api-Key": key.api_key})
            return response.status_code == 200

        await eventually(accepted, 5.0, "the enabled key to work again", interval_s=0.1)


def test_curl_publishes_and_consumes(http_cluster: TestCluster) -> None:
    stream = unique("curl")
    base, key = http_cluster.http_url(), http_cluster.credential

    def curl(*args: str) -> Any:
        done = subprocess.run(
            ["curl", "-sS", "--fail-with-body", "-H", f"X-Api-Key: {key}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(done.stdout) if done.stdout.strip() else None

    curl(
        "-X",
        "PUT",
        f"{base}/v1/streams/{stream}",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"partitions": 1}',
    )
    published = curl(
        f"{base}/v1/streams/{stream}/messages",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"hello": "curl"}',
    )
    assert published["messages"] == [{"partition": 0, "offset": 0}]
    consumer = curl(
        "-X", "POST", f"{base}/v1/streams/{stream}/subscriptions/cli/consumers?start=earliest"
    )
    got = curl(f"{base}/v1/consumers/{consumer['consumer_id']}/messages?wait_ms=5000")
    assert [m["value"] for m in got["messages"]] == [{"hello": "curl"}]
    curl(
        f"{base}/v1/consumers/{consumer['consumer_id']}/ack",
        "-H",
        "Content-Type: application/json",
        "-d",
        '{"messages": [{"partition": 0, "offset": 0}]}',
    )
    curl("-X", "DELETE", f"{base}/v1/consumers/{consumer['consumer_id']}")


def readme_walkthrough() -> list[str]:
    """The commands of the README's curl walkthrough, first line (H and K) left out."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("## HTTP/JSON with curl", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return block.splitlines()[1:]


def test_the_readme_curl_walkthrough_runs(http_cluster: TestCluster) -> None:
    lines = readme_walkthrough()
    sse = [line for line in lines if "/events" in line]
    script = "\n".join(
        [
            "set -euo pipefail",
            'curl() { command curl -sS --fail-with-body "$@"; echo; }',
            f"H={http_cluster.http_url()}; K='X-Api-Key: {http_cluster.credential}'",
            *[line for line in lines if line not in sse],
            sse[0].split("  #")[0].replace("-m 5", "-m 2") + " || test $? = 28",
        ]
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout.splitlines()
    published = json.loads(next(line for line in out if '"count":2' in line))
    assert published["messages"] == [{"partition": 0, "offset": 1}, {"partition": 0, "offset": 2}]
    polled = json.loads(next(line for line in out if line.startswith('{"messages"')))
    assert [m.get("value", m.get("text")) for m in polled["messages"]] == [
        {"order": 1},
        {"order": 2},
        "hi",
    ]
    assert "event: consumer" in done.stdout
    assert "event: messages" in done.stdout


async def test_a_gateway_stops_promptly_with_http_consumers_attached(
    fresh_cluster: TestCluster,
) -> None:
    headers = {"X-Api-Key": fresh_cluster.credential}
    async with httpx.AsyncClient(
        base_url=fresh_cluster.http_url(), headers=headers, timeout=30
    ) as client:
        stream = unique("stop")
        await client.put(f"/v1/streams/{stream}", json={"partitions": 1})
        events = f"/v1/streams/{stream}/subscriptions/sse/events"
        async with client.stream("GET", events, params={"type": "shared"}) as response:
            received = sse_events(response)
            assert (await anext(received))[0] == "consumer"
            started = time.monotonic()
            code = await asyncio.to_thread(fresh_cluster.stop, "gateway")
            assert code == 0
            # Held by the SSE response, uvicorn's graceful stop would wait 5 s for it.
            assert time.monotonic() - started < 4, "the SSE response must not hold the stop"
            kind, problem = await anext(received)
            assert kind == "error"
            assert problem["status"] == 503
