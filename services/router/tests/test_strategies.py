"""Unit tests of each subscription type's strategy, against a fake subscription (`Host`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from test_subscription import keyed_batch

from tamto_common.errors import FailedPrecondition
from tamto_protocol.batch import decode_batch
from tamto_router.acks import AckSet
from tamto_router.consumers import Consumers
from tamto_router.model import Batch, SubscriptionType
from tamto_router.runs import Run, WaitingRuns
from tamto_router.slots import ConsumerSlot
from tamto_router.strategies import Strategy, for_type
from tamto_router.strategies.key_shared import KeyShared


@dataclass
class FakeLog:
    stream: str = "s"
    partition: int = 0
    start_offset: int = 0
    durable_offset: int = 0


@dataclass
class Handed:
    slot: ConsumerSlot
    piece: Batch
    count: int
    offsets: list[int] | None


@dataclass
class FakeHost(WaitingRuns):
    """What a strategy may use of its subscription, recorded instead of delivered."""

    batches: list[Batch] = field(default_factory=list)
    name: str = "sub"
    log: Any = field(default_factory=FakeLog)
    acks: AckSet = field(default_factory=lambda: AckSet(0))
    consumers: Consumers = field(default_factory=Consumers)
    in_flight: list[Run] = field(default_factory=list)
    pending: list[Run] = field(default_factory=list)
    position: int = 0
    read_max: int = 1000
    served: list[ConsumerSlot] = field(default_factory=list)
    handed: list[Handed] = field(default_factory=list)
    serve_result: bool = True

    def __post_init__(self) -> None:
        self.log.durable_offset = self.batches[-1].end if self.batches else 0

    async def read(self, first: int, want: int) -> list[Batch] | None:
        return [b for b in self.batches if b.end > first and b.base_offset < first + want]

    def fresh_end(self) -> int:
        return int(self.log.durable_offset)

    async def serve(self, slot: ConsumerSlot, now: float) -> bool:
        self.served.append(slot)
        return self.serve_result

    def hand(
        self,
        slot: ConsumerSlot,
        piece: Batch,
        count: int,
        now: float,
        offsets: list[int] | None = None,
    ) -> None:
        self.handed.append(Handed(slot, piece, count, offsets))


def attach(host: FakeHost, strategy: Strategy, name: str, credit: int = 10) -> ConsumerSlot:
    slot = ConsumerSlot(name)
    slot.credit.grant(credit)
    host.consumers.add(slot, keyed=strategy.keyed, what="test")
    return slot


@pytest.mark.parametrize("kind", list(SubscriptionType))
def test_every_type_has_its_own_strategy_with_its_own_state(kind: SubscriptionType) -> None:
    made = for_type(kind)
    assert made.type is kind
    assert made is not for_type(kind)
    assert made.keyed is (kind is SubscriptionType.KEY_SHARED)
    # Every type that keeps an order waits for the earlier ledgers' acks; shared has none.
    assert made.drain_gated is (kind is not SubscriptionType.SHARED)


@pytest.mark.parametrize(
    ("kind", "refusal"),
    [
        (SubscriptionType.EXCLUSIVE, r"subscription 'sub' on s/0 already has a consumer"),
        (SubscriptionType.MULTICAST, r"multicast consumer 'sub' on s/0 is already connected"),
        (SubscriptionType.FAILOVER, None),
        (SubscriptionType.SHARED, None),
        (SubscriptionType.KEY_SHARED, None),
    ],
)
def test_who_may_join_consumers_already_attached(
    kind: SubscriptionType, refusal: str | None
) -> None:
    strategy, host = for_type(kind), FakeHost()
    attach(host, strategy, "a")
    if refusal is None:
        strategy.admit(host)
    else:
        with pytest.raises(FailedPrecondition, match=refusal):
            strategy.admit(host)


@pytest.mark.parametrize(
    "kind", [SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER, SubscriptionType.MULTICAST]
)
async def test_one_active_consumer_the_first_by_name_and_only_with_credit(
    kind: SubscriptionType,
) -> None:
    strategy, host = for_type(kind), FakeHost()
    late = attach(host, strategy, "b")
    first = attach(host, strategy, "a", credit=0)
    assert await strategy.dispatch(host, 0.0) is False, "the active one has no credit"
    assert host.served == []
    first.credit.grant(5)
    assert await strategy.dispatch(host, 0.0) is True
    assert await strategy.dispatch(host, 0.0) is True
    assert host.served == [first, first]
    assert late not in host.served
    assert strategy.budget(first) is None  # a whole batch may overdraw


async def test_shared_takes_turns_among_consumers_with_credit_and_caps_each_by_it() -> None:
    strategy, host = for_type(SubscriptionType.SHARED), FakeHost()
    a, b = attach(host, strategy, "a", credit=3), attach(host, strategy, "b", credit=7)
    dry = attach(host, strategy, "c", credit=0)
    for _ in range(4):
        await strategy.dispatch(host, 0.0)
    assert host.served == [a, b, a, b]
    assert dry not in host.served
    assert strategy.budget(a) == 3
    assert strategy.budget(b) == 7


async def test_dispatch_reports_what_the_subscription_served() -> None:
    strategy, host = for_type(SubscriptionType.SHARED), FakeHost(serve_result=False)
    attach(host, strategy, "a")
    assert await strategy.dispatch(host, 0.0) is False  # nothing due and nothing new


@pytest.mark.parametrize("kind", list(SubscriptionType))
def test_an_ack_settles_another_consumers_messages_only_with_one_active_consumer(
    kind: SubscriptionType,
) -> None:
    strategy = for_type(kind)
    in_flight = [Run(10, 19, 1, 0.0, consumer=2), Run(20, 29, 1, 0.0, consumer=1)]
    applied = strategy.ackable([(0, 39)], 1, in_flight)
    if kind in (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED):
        assert applied == [(0, 9), (20, 39)]  # 10-19 stay consumer 2's
    else:
        assert applied == [(0, 39)]


async def test_key_shared_sends_each_key_to_its_consumer_in_one_sparse_delivery() -> None:
    keys = [b"k0", b"k1", b"k2", b"k3", b"k0", b"k1", b"k2", b"k3"]
    strategy = for_type(SubscriptionType.KEY_SHARED)
    host = FakeHost([keyed_batch(0, keys)])
    a, b = attach(host, strategy, "a"), attach(host, strategy, "b")
    assert await strategy.dispatch(host, 0.0) is True
    assert host.position == 8
    seen: dict[bytes, ConsumerSlot] = {}
    handed_offsets: list[int] = []
    for handed in host.handed:
        assert handed.count == 1
        assert handed.offsets is not None
        assert handed.piece.count == len(handed.offsets)
        got_keys = decode_batch(handed.piece.arrow_ipc).column("key").to_pylist()
        for offset, key in zip(handed.offsets, got_keys, strict=True):
            assert key == keys[offset]
            assert seen.setdefault(key, handed.slot) is handed.slot, "a key went to two"
            assert handed.slot is host.consumers.owner(key)
        handed_offsets.extend(handed.offsets)
    assert sorted(handed_offsets) == list(range(8))
    assert {h.slot.id for h in host.handed} <= {a.id, b.id}


async def test_key_shared_holds_a_key_back_while_another_consumer_has_it_in_flight() -> None:
    keys = [b"x", b"y", b"x"]
    strategy = KeyShared()
    host = FakeHost([keyed_batch(0, keys)])
    only = attach(host, strategy, "a")
    strategy.keys.deliver(100, b"x", only.id + 1_000)  # an earlier one, at a consumer since gone
    await strategy.dispatch(host, 0.0)
    assert [h.offsets for h in host.handed] == [[1]]  # only y's message went out
    assert [(r.first, r.last) for r in host.pending] == [(0, 0), (2, 2)]
    strategy.settled([(100, 100)])  # its old consumer acked it
    host.handed.clear()
    assert await strategy.dispatch(host, 0.0) is True
    assert [h.offsets for h in host.handed] == [[0], [2]]  # the waiting runs, in order
    assert host.pending == []


async def test_key_shared_reads_nothing_while_no_consumer_has_credit() -> None:
    strategy = KeyShared()
    host = FakeHost([keyed_batch(0, [b"x", b"y"])])
    assert await strategy.dispatch(host, 0.0) is False  # no credit anywhere: nothing read
    assert host.position == 0


async def test_key_shared_a_given_back_message_blocks_its_key_until_redelivered() -> None:
    strategy = KeyShared()
    host = FakeHost([keyed_batch(0, [b"x", b"x"])])
    slot = attach(host, strategy, "a")
    strategy.keys.deliver(0, b"x", slot.id)
    strategy.given_back(0, 0)  # e.g. nacked: offset 0 waits, so 1 must not overtake it
    host.pending.append(Run(0, 0, 1, due=10.0))  # due later than now
    host.position = 1
    await strategy.dispatch(host, 0.0)
    assert host.handed == []
    assert sorted((r.first, r.last) for r in host.pending) == [(0, 0), (1, 1)]
    await strategy.dispatch(host, 10.0)  # both due now: in order, each its own count
    assert [(h.offsets, h.count) for h in host.handed] == [([0], 2), ([1], 1)]
