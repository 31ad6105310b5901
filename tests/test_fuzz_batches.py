"""Property-based fuzzing of batch decoding: whatever bytes arrive,
`validate_batch` refuses them with `BatchFormatError`, or every value of what it
accepts can be read and comes from the bytes sent.

CI runs a short, derandomized campaign; TAMTO_LONG_TESTS=1 a long random one.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tamto_protocol.batch import BatchFormatError, decode_batch, validate_batch
from tamto_testing.crafted_batches import CRAFTED
from tests.fuzz import CORPUS, LONG, arrow_buffers, fuzz_settings


@pytest.mark.timeout(3600 if LONG else 300)
@fuzz_settings(ci_examples=300, long_examples=20_000)
@given(data=arrow_buffers(), count=st.integers(0, 40) | st.sampled_from([37, 3, 1]))
def test_validate_batch_refuses_or_accepts_only_readable_batches(data: bytes, count: int) -> None:
    try:
        batch = validate_batch(data, count, 0)
    except BatchFormatError:
        return
    assert batch.num_rows == count
    rows = batch.to_pylist()  # reading every value must be safe
    assert len(rows) == count
    for row in rows:
        payload = row["payload"]
        assert isinstance(payload, bytes)
        assert payload in data, "an accepted payload holds bytes the producer did not send"


def test_the_corpus_holds_valid_and_refused_batches() -> None:
    """The valid ones pass; every crafted one is refused."""
    for data in CORPUS[:3]:
        rows = decode_batch(data).num_rows
        assert validate_batch(data, rows, 0).num_rows == rows
    for name, crafted in CRAFTED.items():
        try:
            validate_batch(crafted.arrow_ipc, crafted.count, 0)
        except BatchFormatError:
            continue
        raise AssertionError(f"crafted batch {name!r} was accepted")
