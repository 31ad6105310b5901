"""The CLI's ephemeral-stream commands: `tamto pub --topic`, `tamto sub --match --group`,
`tamto request` (docs/ephemeral.md).

`pub` and `sub` in `main` hand over to these when given the ephemeral options;
`request` is registered as its own command.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated

import typer

from tamto_cli.connect import Gateway, reaches_gateway
from tamto_cli.options import AsJson
from tamto_cli.output import report

if TYPE_CHECKING:
    import tamto_sdk


def message_line(message: tamto_sdk.EphemeralMessage, as_json: bool) -> str:
    """`STREAM[TOPIC]<TAB>KEY<TAB>PAYLOAD`, or one JSON object (payload as text)."""
    key = message.key.decode(errors="replace") if message.key else ""
    text = message.payload.decode(errors="replace")
    if not as_json:
        return f"{message.stream}[{message.topic}]\t{key}\t{text}"
    fields = {
        "stream": message.stream,
        "topic": message.topic,
        "key": key if message.key is not None else None,
        "headers": dict(message.headers),
        "payload": text,
    }
    return json.dumps(fields, ensure_ascii=False)


async def publish(
    client: tamto_sdk.Client,
    stream: str,
    payloads: list[str],
    topic: str,
    key: bytes | None,
    as_json: bool = False,
) -> None:
    """Publish `payloads` under `topic` (at most once); prints one summary line."""
    async with client.ephemeral_producer(stream) as producer:
        for payload in payloads:
            await producer.send(payload.encode(), topic=topic, key=key)
    text = f"{stream}: {len(payloads)} published to topic {topic!r}"
    report(as_json, text, {"stream": stream, "topic": topic, "published": len(payloads)})


async def subscribe(
    client: tamto_sdk.Client,
    stream: str,
    match: str | None,
    group: str,
    count: int,
    as_json: bool = False,
) -> None:
    """Print what the subscription receives, `STREAM[TOPIC]<TAB>KEY<TAB>PAYLOAD` a line
    (or one JSON object a line)."""
    seen = 0
    async with client.subscribe(stream, match=match, group=group) as subscription:
        async for message in subscription:
            print(message_line(message, as_json), flush=True)
            seen += 1
            if count and seen >= count:
                return


@reaches_gateway
def request(
    gateway: Gateway,
    stream: str,
    payload: Annotated[str, typer.Argument(help="the request's payload")],
    topic: Annotated[str, typer.Option(help="the request's topic")] = "",
    timeout_s: Annotated[
        float | None,
        typer.Option(help="wait this long for the reply (default: the stream's)"),
    ] = None,
    response_stream: Annotated[
        str, typer.Option(help="name the response stream (default: a unique one)")
    ] = "",
    wait_for_responder: Annotated[
        bool, typer.Option(help="with nobody consuming the topic, wait instead of failing")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Send a request to an ephemeral stream and print its reply (--json: one JSON
    object); exits 12 on a timeout (the server's: DEADLINE_EXCEEDED) and 11 at once when
    nobody consumes the topic (no responders: UNAVAILABLE), unless --wait-for-responder."""

    def ask(client: tamto_sdk.Client) -> Awaitable[tamto_sdk.EphemeralMessage]:
        return client.request(
            stream,
            payload.encode(),
            topic=topic,
            timeout_s=timeout_s,
            response_stream=response_stream,
            wait_for_responder=wait_for_responder,
        )

    reply = gateway.fetch(ask)
    if as_json:
        print(message_line(reply, True), flush=True)
    else:
        typer.echo(reply.payload.decode(errors="replace"))
