"""`tamto sub VERB` reaches the subscription verbs while `tamto sub STREAM` still
consumes, and peeked messages print as `tamto sub` prints them."""

from __future__ import annotations

from datetime import UTC, datetime

from typer.testing import CliRunner

import tamto_sdk
from tamto_cli.main import app
from tamto_cli.output import PayloadFormat, message_line


def test_sub_with_a_verb_runs_the_subscription_command() -> None:
    result = CliRunner().invoke(app, ["sub", "seek", "--help"])
    assert result.exit_code == 0
    assert "subscription seek" in result.output


def test_sub_with_a_stream_still_consumes() -> None:
    result = CliRunner().invoke(app, ["sub", "--help"])
    assert result.exit_code == 0
    assert "--subscription" in result.output


def test_seek_needs_exactly_one_of_to_and_offset() -> None:
    result = CliRunner().invoke(app, ["sub", "seek", "s", "sub1"])
    assert result.exit_code == 2
    bad = CliRunner().invoke(app, ["sub", "seek", "s", "sub1", "--offset", "0:5"])
    assert bad.exit_code == 2


def test_message_line_is_the_sub_format() -> None:
    message = tamto_sdk.Message(
        stream="s",
        partition=1,
        offset=7,
        payload=b"hi",
        key=b"k",
        publish_time=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert message_line(message, PayloadFormat.HEX, False) == "s/1@7\tk\t6869"
    assert '"offset": 7' in message_line(message, PayloadFormat.RAW, True)
