"""Dead-lettering a batch whose buffers lie copies none of its bytes."""

from __future__ import annotations

from tamto_protocol.batch import decode_batch, validate_batch
from tamto_router.dead_letters import Origin, dead_letter_batch
from tamto_testing.crafted_batches import CRAFTED, ROWS, valid_batch, valid_columns

ORIGIN = Origin("orders", 0, "billing")


def test_an_undecodable_batch_becomes_empty_dead_letters_that_say_why() -> None:
    lying = CRAFTED["payload offset past the data"].arrow_ipc
    dead = validate_batch(dead_letter_batch(lying, 100, ORIGIN, 3, "max deliveries"), ROWS, 0)
    assert dead.column("payload").to_pylist() == [b""] * ROWS
    headers = [dict(h) for h in dead.column("headers").to_pylist()]
    assert [h["tamto.dlq.offset"] for h in headers] == [str(100 + i) for i in range(ROWS)]
    assert all(h["tamto.dlq.reason"].startswith("max deliveries; undecodable: ") for h in headers)
    assert "column 'payload'" in headers[0]["tamto.dlq.reason"]


def test_a_valid_batch_keeps_its_payloads() -> None:
    dead = decode_batch(dead_letter_batch(valid_batch(), 0, ORIGIN, 3, "max deliveries"))
    assert dead.column("payload").to_pylist() == list(valid_columns().payloads)
    assert dict(dead.column("headers")[0].as_py())["tamto.dlq.reason"] == "max deliveries"
