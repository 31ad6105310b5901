"""The gateway counts its Consume handlers by step (`tamto_gateway_consume_handlers`).

The crowd: a consumer of 10,000 never attached, and the count by step told
that its stream never reached the gateway's handler at all (every handler was
`serving`, one fewer than the client's streams): see `tests/e2e/test_crowd.py`.
"""

from __future__ import annotations

from tamto_gateway.consume import CONSUME_STEPS, SetupStep


def counts() -> dict[str, float]:
    return {
        sample.labels["step"]: sample.value
        for metric in CONSUME_STEPS.collect()
        for sample in metric.samples
    }


def test_a_handler_counts_at_its_current_step_only_and_not_once_done() -> None:
    before = counts()
    first, second = SetupStep(), SetupStep()
    first.to("authenticating")
    second.to("authenticating")
    first.to("opening")
    now = counts()
    assert now["authenticating"] - before.get("authenticating", 0) == 1
    assert now["opening"] - before.get("opening", 0) == 1
    first.done()
    second.done()
    second.done()  # ending twice counts once
    assert counts() == {step: before.get(step, 0) for step in counts()}
