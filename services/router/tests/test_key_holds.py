"""Unit tests of `KeyHolds`: the two rules that keep key-shared delivery in order per key."""

from __future__ import annotations

from tamto_router.key_holds import KeyHolds

A, B = b"a", b"b"
ONE, TWO = 1, 2  # consumer slot ids


def test_a_fresh_key_may_go_to_any_consumer() -> None:
    holds = KeyHolds()
    assert holds.may_deliver(0, A, ONE)
    assert holds.may_deliver(0, A, TWO)
    assert holds.may_deliver(0, None, ONE)  # keyless messages share the key None


def test_a_key_in_flight_goes_only_to_its_holder_until_settled() -> None:
    holds = KeyHolds()
    holds.deliver(0, A, ONE)
    holds.deliver(1, A, ONE)
    assert holds.may_deliver(2, A, ONE)
    assert not holds.may_deliver(2, A, TWO)  # the key moved on the ring: held back
    assert holds.may_deliver(2, B, TWO)  # other keys are not affected
    holds.settle(0, 0)
    assert not holds.may_deliver(2, A, TWO), "one message of the key is still in flight"
    holds.settle(1, 1)
    assert holds.may_deliver(2, A, TWO)


def test_a_range_settle_releases_every_offset_in_it() -> None:
    holds = KeyHolds()
    for offset in range(10):
        holds.deliver(offset, A if offset % 2 else B, ONE)
    holds.settle(0, 1_000_000)  # wider than what is tracked: the sparse path
    assert holds.may_deliver(10, A, TWO)
    assert holds.may_deliver(10, B, TWO)


def test_a_given_back_message_goes_before_the_later_ones_of_its_key() -> None:
    holds = KeyHolds()
    holds.deliver(5, A, ONE)
    holds.give_back(5, 5)
    # The holder no longer holds the key, but offset 5 waits for redelivery:
    assert not holds.may_deliver(6, A, ONE)
    assert not holds.may_deliver(6, A, TWO)
    assert holds.may_deliver(5, A, TWO), "the waiting message itself may go anywhere"
    assert holds.may_deliver(6, B, TWO)
    holds.deliver(5, A, TWO)  # redelivered: it no longer waits, TWO holds the key
    assert holds.may_deliver(6, A, TWO)
    assert not holds.may_deliver(6, A, ONE)


def test_settling_a_waiting_message_stops_it_blocking_its_key() -> None:
    holds = KeyHolds()
    holds.deliver(3, A, ONE)
    holds.give_back(3, 3)
    holds.settle(3, 3)  # dead-lettered or acked while it waited
    assert holds.may_deliver(4, A, TWO)


def test_giving_back_what_was_never_delivered_changes_nothing() -> None:
    holds = KeyHolds()
    holds.give_back(0, 100)
    holds.settle(0, 100)
    assert holds.may_deliver(0, A, ONE)


def test_waiting_offsets_outside_the_pending_runs_are_forgotten() -> None:
    holds = KeyHolds()
    holds.deliver(1, A, ONE)
    holds.deliver(7, B, ONE)
    holds.give_back(1, 7)
    assert not holds.may_deliver(2, A, ONE)
    assert not holds.may_deliver(8, B, ONE)
    holds.keep_waiting_only([(6, 9)])  # offset 1 left the pending runs some other way
    assert holds.may_deliver(2, A, ONE), "a lost waiting offset must not stall its key"
    assert not holds.may_deliver(8, B, ONE)
