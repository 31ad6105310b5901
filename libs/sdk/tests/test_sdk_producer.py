from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime

import grpc
import pyarrow as pa
import pytest
from sdk_fake_gateway import API_KEY, FAST, FakeGateway

from tamto_protocol.batch import decode_batch
from tamto_protocol.partitioning import partition_for_key
from tamto_sdk import Client, ClientOptions, PublishedBatch, PublishResult, connect
from tamto_sdk.errors import Closed, InvalidArgument, Unavailable


async def test_sends_are_batched_into_few_publish_rpcs(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    async with client.producer("s", linger_s=0.05, max_batch_messages=100) as producer:
        futures = [await producer.send(f"m{i}".encode()) for i in range(1000)]
        results = await asyncio.gather(*futures)
    assert [r.offset for r in results] == list(range(1000))
    assert all(r == PublishResult("s", 0, r.offset) for r in results)
    assert 10 <= len(gateway.publish_requests) <= 20
    assert all(r.batch.count <= 100 for r in gateway.publish_requests)
    assert [row["payload"] for row in gateway.rows("s", 0)] == [
        f"m{i}".encode() for i in range(1000)
    ]


async def test_batch_carries_every_message_field(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    async with client.producer("s") as producer:
        await producer.send_and_wait(
            b"p", key=b"k", headers={"trace": "t1"}, id="dedup-1", event_time=when
        )
    (request,) = gateway.publish_requests
    row = decode_batch(request.batch.arrow_ipc).to_pylist()[0]
    assert row["payload"] == b"p"
    assert row["key"] == b"k"
    assert row["headers"] == [("trace", "t1")]
    assert row["id"] == "dedup-1"
    assert row["event_time"] == when


async def test_keyed_messages_go_to_partition_for_key_in_order(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 4)
    keys = [f"key-{i}".encode() for i in range(12)]
    async with client.producer("s", linger_s=0.02, max_batch_messages=7) as producer:
        futures = []
        for seq in range(20):
            for key in keys:
                futures.append((key, seq, await producer.send(str(seq).encode(), key=key)))
        await producer.flush()
    for key, _, future in futures:
        assert future.result().partition == partition_for_key(key, 4)
    used = set()
    for p in range(4):
        seen: dict[bytes, list[int]] = {}
        for row in gateway.rows("s", p):
            assert partition_for_key(row["key"], 4) == p
            seen.setdefault(row["key"], []).append(int(row["payload"]))
            used.add(p)
        for sequence in seen.values():
            assert sequence == list(range(20))
    assert len(used) > 1
    # Offsets reported to producers match where the fake stored the messages.
    for key, seq, future in futures:
        result = future.result()
        row = gateway.rows("s", result.partition)[result.offset]
        assert (row["key"], int(row["payload"])) == (key, seq)


async def test_keyless_messages_stick_per_batch_and_rotate(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 4)
    async with client.producer("s", linger_s=1.0, max_batch_messages=10) as producer:
        futures = [await producer.send(b"x") for _ in range(40)]
        await producer.flush()
    partitions = [f.result().partition for f in futures]
    # Ten consecutive messages share a partition; consecutive batches do not.
    chunks = [partitions[i : i + 10] for i in range(0, 40, 10)]
    assert all(len(set(chunk)) == 1 for chunk in chunks)
    firsts = [chunk[0] for chunk in chunks]
    assert all(a != b for a, b in itertools.pairwise(firsts))
    assert len(gateway.publish_requests) == 4


async def test_linger_flushes_a_partial_batch(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    producer = client.producer("s", linger_s=0.03, max_batch_messages=1000)
    first = await producer.send(b"a")
    second = await producer.send(b"b")
    third = await producer.send(b"c")
    # Nothing calls flush: only the linger timer can send this batch.
    results = await asyncio.wait_for(asyncio.gather(first, second, third), 5)
    assert [r.offset for r in results] == [0, 1, 2]
    assert len(gateway.publish_requests) == 1
    await producer.close()


async def test_send_blocks_when_max_pending_is_reached(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_gate = asyncio.Event()
    async with client.producer("s", linger_s=0, max_pending_messages=5) as producer:
        futures = [await producer.send(b"x") for _ in range(5)]
        assert producer.pending == 5
        await gateway.wait_for(lambda: len(gateway.publish_requests) == 1)
        blocked = asyncio.create_task(producer.send(b"y"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not blocked.done()
        gateway.publish_gate.set()
        sixth = await asyncio.wait_for(blocked, 5)
        assert [f.result().offset for f in await _all(futures)] == [0, 1, 2, 3, 4]
        assert (await asyncio.wait_for(sixth, 5)).offset == 5


async def _all(futures: list[asyncio.Future[PublishResult]]) -> list[asyncio.Future[PublishResult]]:
    await asyncio.wait_for(asyncio.gather(*futures), 5)
    return futures


async def test_unavailable_is_retried_until_success(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_failures.extend([grpc.StatusCode.UNAVAILABLE] * 3)
    async with client.producer("s") as producer:
        result = await producer.send_and_wait(b"x")
    assert result.offset == 0
    assert len(gateway.publish_requests) == 4
    assert len(gateway.rows("s", 0)) == 1


async def test_retries_stop_at_the_deadline(gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_failures.extend([grpc.StatusCode.UNAVAILABLE] * 10_000)
    options = ClientOptions(
        retry_deadline_s=0.2, retry_initial_backoff_s=0.01, retry_max_backoff_s=0.02
    )
    async with (
        await connect(gateway.url, api_key=API_KEY, options=options) as client,
        client.producer("s") as producer,
    ):
        future = await producer.send(b"x")
        with pytest.raises(Unavailable) as info:
            await asyncio.wait_for(future, 5)
    assert info.value.retriable
    assert info.value.code == "UNAVAILABLE"
    assert len(gateway.publish_requests) > 1


async def test_non_retriable_error_fails_the_batch_futures(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_failures.append(grpc.StatusCode.INVALID_ARGUMENT)
    async with client.producer("s", linger_s=1.0) as producer:
        futures = [await producer.send(b"x") for _ in range(3)]
        await producer.flush()
        for future in futures:
            with pytest.raises(InvalidArgument) as info:
                future.result()
            assert not info.value.retriable
            assert info.value.code == "INVALID_ARGUMENT"
        # The producer keeps working after a failed batch.
        after = await producer.send(b"y")
        await producer.flush()
        assert after.result().offset == 0
    assert len(gateway.publish_requests) == 2


async def test_close_flushes_and_rejects_new_sends(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 2)
    producer = client.producer("s", linger_s=10.0)
    futures = [await producer.send(b"x", key=str(i).encode()) for i in range(10)]
    await producer.close()
    assert all(f.done() and f.exception() is None for f in futures)
    with pytest.raises(Closed):
        await producer.send(b"late")


async def test_client_close_flushes_its_producers(gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    client = await connect(gateway.url, api_key=API_KEY, options=FAST)
    producer = client.producer("s", linger_s=10.0)
    future = await producer.send(b"x")
    await client.close()
    assert future.result().offset == 0


async def test_idempotent_ids_are_one_sequence_per_producer(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 2)
    async with client.producer("s", linger_s=1.0, max_batch_messages=10) as producer:
        for i in range(25):
            await producer.send(b"x", key=b"k" if i % 2 else None, id="mine" if i == 7 else None)
    ids = [row["id"] for p in range(2) for row in gateway.rows("s", p)]
    assert "mine" in ids
    generated = [i for i in ids if i != "mine"]
    prefix = {i.rpartition(":")[0] for i in generated}
    assert len(prefix) == 1
    assert prefix.pop().startswith("p-")
    assert sorted(int(i.rpartition(":")[2]) for i in generated) == list(range(24))
    # Within a partition the sequence only grows (what the router's fast dedup path needs).
    for p in range(2):
        numbers = [
            int(r["id"].rpartition(":")[2]) for r in gateway.rows("s", p) if r["id"] != "mine"
        ]
        assert numbers == sorted(numbers)


async def test_batches_are_capped_by_bytes(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    async with client.producer("s", linger_s=1.0, max_batch_bytes=10_000) as producer:
        futures = [await producer.send(bytes(1000)) for _ in range(30)]
        await producer.flush()
    assert [f.result().offset for f in futures] == list(range(30))
    assert all(len(r.batch.arrow_ipc) < 20_000 for r in gateway.publish_requests)
    assert len(gateway.publish_requests) >= 3


def test_batch_size_limits_are_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="at most"):
        client.producer("s", max_batch_bytes=64 << 20)
    with pytest.raises(ValueError, match="positive"):
        client.producer("s", max_batch_messages=0)


async def test_send_type_errors(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    async with client.producer("s") as producer:
        with pytest.raises(TypeError, match="payload"):
            await producer.send("text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key"):
            await producer.send(b"x", key="k")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="headers"):
            await producer.send(b"x", headers={"a": 1})  # type: ignore[dict-item]
        with pytest.raises(TypeError, match="id"):
            await producer.send(b"x", id=5)  # type: ignore[arg-type]
        # Annotated as bytes; any bytes-like object is accepted at run time.
        result = await producer.send_and_wait(
            bytearray(b"ok"),  # type: ignore[arg-type]
            key=memoryview(b"k"),  # type: ignore[arg-type]
        )
    row = gateway.rows("s", 0)[result.offset]
    assert (row["payload"], row["key"]) == (b"ok", b"k")


async def test_send_batch_of_payloads_is_one_rpc_with_every_offset(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 3)
    async with client.producer("s", linger_s=1.0) as producer:
        first = await producer.send(b"single")
        future = await producer.send_batch([f"m{i}".encode() for i in range(500)])
        published = await asyncio.wait_for(future, 5)
    assert isinstance(published, PublishedBatch)
    assert len(published) == 500
    partition = first.result().partition
    assert set(published.partitions.to_pylist()) == {partition}
    assert published.offsets.to_pylist() == list(range(1, 501))
    assert published[3] == PublishResult("s", partition, 4)
    assert len(gateway.publish_requests) == 1  # the single send and the batch travel together
    rows = gateway.rows("s", partition)
    assert [r["payload"] for r in rows] == [b"single"] + [f"m{i}".encode() for i in range(500)]
    assert all(r["id"] for r in rows)


async def test_send_batch_splits_at_the_caps_and_spreads_keyless_rows(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 4)
    async with client.producer("s", linger_s=1.0, max_batch_messages=100) as producer:
        published = await (await producer.send_batch([bytes([i % 256]) for i in range(1000)]))
    assert len(gateway.publish_requests) == 10
    assert all(r.batch.count == 100 for r in gateway.publish_requests)
    partitions = published.partitions.to_pylist()
    assert len(set(partitions)) == 4
    for row, (p, offset) in enumerate(zip(partitions, published.offsets.to_pylist(), strict=True)):
        assert gateway.rows("s", p)[offset]["payload"] == bytes([row % 256])


async def test_send_batch_routes_keys_and_keeps_order_with_sends(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 4)
    keys = [f"k{i % 7}".encode() for i in range(200)]
    async with client.producer("s", linger_s=0.02, max_batch_messages=30) as producer:
        before = [await producer.send(b"-1", key=k) for k in keys[:7]]
        published = await (
            await producer.send_batch(
                [str(i).encode() for i in range(200)],
                keys=keys,
                headers=[{"n": str(i)} for i in range(200)],
                ids=[f"order-{i}" for i in range(200)],
            )
        )
        await producer.flush()
    assert all(f.result().offset >= 0 for f in before)
    for i, (p, offset) in enumerate(
        zip(published.partitions.to_pylist(), published.offsets.to_pylist(), strict=True)
    ):
        assert p == partition_for_key(keys[i], 4)
        row = gateway.rows("s", p)[offset]
        assert (row["payload"], row["key"], row["id"]) == (str(i).encode(), keys[i], f"order-{i}")
        assert row["headers"] == [("n", str(i))]
    for p in range(4):
        per_key: dict[bytes, list[int]] = {}
        for row in gateway.rows("s", p):
            per_key.setdefault(row["key"], []).append(int(row["payload"]))
        for sequence in per_key.values():
            assert sequence[0] == -1
            assert sequence[1:] == sorted(sequence[1:])


async def test_send_batch_takes_an_arrow_table(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    table = pa.table(
        {
            "payload": pa.array([b"a", b"b"], pa.large_binary()),
            "id": ["x", None],
            "event_time": pa.array([when, None], pa.timestamp("us", tz="UTC")),
        }
    )
    async with client.producer("s") as producer:
        published = await (await producer.send_batch(table))
        empty = await (await producer.send_batch([]))
    assert published.offsets.to_pylist() == [0, 1]
    assert len(empty) == 0
    rows = gateway.rows("s", 0)
    assert [r["payload"] for r in rows] == [b"a", b"b"]
    assert rows[0]["id"] == "x"
    assert rows[1]["id"].startswith("p-")
    assert rows[0]["event_time"] == when
    assert rows[1]["event_time"] is None


async def test_send_batch_refuses_bad_input(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    async with client.producer("s") as producer:
        with pytest.raises(TypeError):
            await producer.send_batch(["text"])
        with pytest.raises(ValueError, match="entries"):
            await producer.send_batch([b"a", b"b"], keys=[b"k"])
        with pytest.raises(ValueError, match="null"):
            await producer.send_batch(pa.array([b"a", None]))
        with pytest.raises(TypeError):
            await producer.send_batch(b"one payload")
        with pytest.raises(TypeError):
            await producer.send_batch(pa.table({"payload": [b"a"]}), keys=[b"k"])
    assert gateway.publish_requests == []


async def test_send_batch_failure_fails_its_future(client: Client, gateway: FakeGateway) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_failures.append(grpc.StatusCode.INVALID_ARGUMENT)
    async with client.producer("s") as producer:
        future = await producer.send_batch([b"a", b"b"])
        with pytest.raises(InvalidArgument):
            await asyncio.wait_for(future, 5)
        assert producer.pending == 0


async def test_several_batches_of_a_partition_are_in_flight_each_naming_the_one_ahead(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    gateway.publish_gate = asyncio.Event()
    async with client.producer("s", max_in_flight=5) as producer:
        futures = []
        for i in range(8):
            futures.append(await producer.send(f"m{i}".encode()))
            sent = min(i + 1, 5)
            await gateway.wait_for(lambda: len(gateway.publish_requests) == sent)  # noqa: B023
        # Five batches of one are in flight; the other messages wait in the sixth.
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(gateway.publish_requests) == 5
        gateway.publish_gate.set()
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert [r.offset for r in results] == list(range(8))
    orders = [r.order for r in gateway.publish_requests]
    assert [r.batch.count for r in gateway.publish_requests] == [1, 1, 1, 1, 1, 3]
    assert {o.producer for o in orders} == {producer._sender.producer_id}
    assert [o.last_sequence for o in orders] == [0, 1, 2, 3, 4, 7]
    assert not orders[0].HasField("after_sequence")
    assert [o.after_sequence for o in orders[1:5]] == [0, 1, 2, 3]


async def test_without_linger_batches_are_clocked_by_the_ones_in_flight(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 4)
    gateway.publish_gate = asyncio.Event()
    async with client.producer("s", max_batch_messages=10, max_in_flight=1) as producer:
        first = await producer.send(b"first")
        # Nothing lingers: the first message goes alone at once.
        await gateway.wait_for(lambda: len(gateway.publish_requests) == 1)
        more = [await producer.send(f"m{i}".encode()) for i in range(9)]
        for _ in range(20):
            await asyncio.sleep(0)
        # While it is in flight the keyless messages wait on its partition, not
        # spread over the idle ones as batches of one.
        assert len(gateway.publish_requests) == 1
        gateway.publish_gate.set()
        results = await asyncio.wait_for(asyncio.gather(first, *more), 5)
        assert [r.batch.count for r in gateway.publish_requests] == [1, 9]
        assert len({r.partition for r in results}) == 1
        # A full batch's worth went to that partition: the next keyless one moves on.
        later = await producer.send_and_wait(b"later")
    assert later.partition != results[0].partition


async def test_send_batch_counts_header_bytes_against_the_byte_cap(
    client: Client, gateway: FakeGateway
) -> None:
    gateway.add_stream("s", 1)
    headers = [{"h": "x" * 1000} if i % 2 == 0 else None for i in range(20)]
    async with client.producer("s", linger_s=1.0, max_batch_bytes=5000) as producer:
        published = await (await producer.send_batch([b"p"] * 20, headers=headers))
    assert published.offsets.to_pylist() == list(range(20))
    # Ten rows carry ~1 KB of headers: about four of those fit under 5,000 bytes.
    counts = [r.batch.count for r in gateway.publish_requests]
    assert sum(counts) == 20
    assert len(counts) >= 3
    assert all(count <= 9 for count in counts)
