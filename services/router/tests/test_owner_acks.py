"""`tamto_router.owner_acks`: an epoch logs its first ack once, and its first and last
ack with their count when its log closes (the chaos campaign's owners check reads them)."""

from __future__ import annotations

from structlog.testing import capture_logs

from tamto_router.owner_acks import OVER, STARTED, OwnerAcks


def test_the_first_ack_and_the_end_are_logged_with_the_epoch() -> None:
    acks = OwnerAcks("s", 3, epoch=7)
    with capture_logs() as logs:
        acks.acked()
        acks.acked()
        acks.over()
    assert [e["event"] for e in logs] == [STARTED, OVER]
    started, over = logs
    assert (started["stream"], started["partition"], started["epoch"]) == ("s", 3, 7)
    assert over["first_ack_at"] == started["first_ack_at"] <= over["last_ack_at"]
    assert over["acks"] == 2


def test_an_epoch_that_never_acked_logs_nothing_and_a_late_ack_extends_the_end() -> None:
    with capture_logs() as logs:
        OwnerAcks("s", 0, epoch=1).over()
    assert logs == []
    acks = OwnerAcks("s", 0, epoch=2)
    with capture_logs() as logs:
        acks.acked()
        acks.over()
        acks.acked()  # answered while the log was closing
    assert [e["event"] for e in logs] == [STARTED, OVER, OVER]
    assert logs[-1]["acks"] == 2
    assert logs[-1]["last_ack_at"] >= logs[1]["last_ack_at"]
