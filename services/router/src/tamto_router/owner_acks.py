"""What a router records of its acknowledgements as a partition's owner, per epoch.

Two routers must never acknowledge publishes to one partition at once (split
brain): the one whose lease may have lapsed stops before another can claim.
A test or a fault campaign checks that from the routers' own records, not from
what clients saw: each `PartitionLog` (one epoch of one partition on this
router) logs `acking as owner` with the wall-clock moment of its first
acknowledgement, and `owner acks over` when it closes, with its first and last
acknowledgement and their count. An epoch whose `owner acks over` is missing
(the router was killed) may have acked until the end of the run.

Wall-clock (`time.time()`) seconds: the routers of one machine share the clock,
so their records compare directly (`tamto_cli.chaos.owners` does).
"""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger(__name__)

#: The log events (their fields: stream, partition, epoch, first_ack_at[, last_ack_at, acks]).
STARTED = "acking as owner"
OVER = "owner acks over"


class OwnerAcks:
    """The first and last acknowledgement of one epoch of one partition on this router."""

    def __init__(self, stream: str, partition: int, epoch: int) -> None:
        self.stream = stream
        self.partition = partition
        self.epoch = epoch
        self.first_at: float | None = None
        self.last_at = 0.0
        self.count = 0
        self._over = False

    def acked(self) -> None:
        """A publish is being acknowledged now (its data is durable on a quorum)."""
        now = time.time()
        self.last_at = now
        self.count += 1
        if self.first_at is None:
            self.first_at = now
            log.info(
                STARTED,
                stream=self.stream,
                partition=self.partition,
                epoch=self.epoch,
                first_ack_at=now,
            )
        if self._over:  # a publish answered while the log was closing: the record grows
            self.over()

    def over(self) -> None:
        """The epoch's log closed: no more acknowledgements from it."""
        self._over = True
        if self.first_at is None:
            return
        log.info(
            OVER,
            stream=self.stream,
            partition=self.partition,
            epoch=self.epoch,
            first_ack_at=self.first_at,
            last_ack_at=self.last_at,
            acks=self.count,
        )
