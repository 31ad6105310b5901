"""The Subscribe field rules: each breach is a precise InvalidArgument."""

from __future__ import annotations

import pytest

from tamto_common.errors import InvalidArgument
from tamto_common.subscribe import (
    MAX_CONSUMER_NAME_CHARS,
    MAX_START_TIME_US,
    check_consumer_name,
    check_partitions,
    check_start_time_us,
)


def test_consumer_names_up_to_the_limit_pass_longer_ones_are_refused() -> None:
    assert check_consumer_name("") == ""
    assert check_consumer_name("é" * MAX_CONSUMER_NAME_CHARS)
    with pytest.raises(InvalidArgument, match="10240 characters; at most 256"):
        check_consumer_name("x" * 10 * 1024)
    with pytest.raises(InvalidArgument, match="control characters"):
        check_consumer_name("a\nb")


@pytest.mark.parametrize("bad", [-1, 2**63 - 1, MAX_START_TIME_US + 1])
def test_start_times_outside_the_calendar_are_refused(bad: int) -> None:
    with pytest.raises(InvalidArgument, match=rf"start.time_us must be .* got {bad}"):
        check_start_time_us(bad)


def test_start_times_inside_it_pass() -> None:
    assert check_start_time_us(0) == 0
    assert check_start_time_us(MAX_START_TIME_US) == MAX_START_TIME_US


def test_a_partition_listed_twice_is_refused() -> None:
    assert check_partitions([2, 0, 1]) == (0, 1, 2)
    assert check_partitions([]) == ()
    with pytest.raises(InvalidArgument, match="partition 0 more than once"):
        check_partitions([0, 0, 0])
