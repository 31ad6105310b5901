"""A client's consume requests over their list limits are refused at the gateway,
naming the field and the limit, before they are routed to any router."""

from __future__ import annotations

from typing import cast

import pytest

from tamto_common.errors import InvalidArgument
from tamto_gateway.consume import FanOut
from tamto_gateway.upstream import Upstream
from tamto_protocol.limits import MAX_RANGES_PER_REQUEST
from tamto_protocol.v1 import messages_pb2
from tamto_testing.hostile_requests import disjoint_ranges


class NoUpstream:
    """No router may be asked anything."""


@pytest.mark.parametrize("verb", ["ack", "nack", "term", "in_progress"])
async def test_a_verb_over_the_range_limit_is_refused_before_routing(verb: str) -> None:
    fan = FanOut(cast(Upstream, NoUpstream()), messages_pb2.Subscribe(stream="s"))
    request = messages_pb2.ConsumeRequest()
    getattr(request, verb).ranges.extend(disjoint_ranges(MAX_RANGES_PER_REQUEST + 1))
    with pytest.raises(InvalidArgument) as refused:
        await fan.forward(request)
    limit = MAX_RANGES_PER_REQUEST
    assert str(refused.value) == (
        f"{verb}.ranges has {limit + 1} elements; at most {limit} are allowed"
    )
